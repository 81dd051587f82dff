"""ValidatingAdmissionPolicies as the API server runs them (admissionregistration.k8s.io/v1):
a policy's ``matchConstraints`` choose the requests it judges, its ``matchConditions`` (CEL)
narrow them, its ``variables`` are computed in order, and the request is refused with the
message of each validation that is false. CEL is cel-python's (the tests' extra).

Used by the stand-in server (``APIServer.policies``) and by the chart's tests, which run the
rendered policies' CEL against objects directly."""

from __future__ import annotations

from typing import Any


def refusals(
    policy: dict[str, Any],
    obj: dict[str, Any] | None,
    namespace: str,
    *,
    request: dict[str, Any] | None = None,
    old: dict[str, Any] | None = None,
) -> list[str]:
    """The messages of the validations ``obj`` (any object), written in ``namespace``, fails;
    ``request`` adds to the request (``operation``, ``userInfo``), ``old`` is ``oldObject``. A
    request the policy's ``matchConditions`` do not match is not judged (no refusal)."""
    import celpy

    env = celpy.Environment()
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel(
            {"namespace": namespace, "operation": "CREATE", **(request or {})}
        ),
    }
    for condition in policy["spec"].get("matchConditions", ()):
        if not env.program(env.compile(condition["expression"])).evaluate(activation):
            return []
    variables: dict[Any, Any] = {}
    for variable in policy["spec"].get("variables", ()):
        activation["variables"] = celpy.celtypes.MapType(variables)
        program = env.program(env.compile(variable["expression"]))
        variables[celpy.celtypes.StringType(variable["name"])] = program.evaluate(activation)
    activation["variables"] = celpy.celtypes.MapType(variables)
    failed = []
    for validation in policy["spec"]["validations"]:
        result = env.program(env.compile(validation["expression"])).evaluate(activation)
        if not isinstance(result, celpy.celtypes.BoolType):  # a CEL error: the policy's bug
            raise TypeError(f"{validation['expression']!r} gave {result!r}, not a bool")
        if not result:
            if "messageExpression" in validation:
                said = env.program(env.compile(validation["messageExpression"]))
                failed.append(str(said.evaluate(activation)))
            else:
                failed.append(" ".join(validation["message"].split()))
    return failed


def judges(policy: dict[str, Any], group: str, resource: str, operation: str) -> bool:
    """Whether the policy's ``matchConstraints.resourceRules`` take this request."""
    for rule in policy["spec"]["matchConstraints"]["resourceRules"]:
        if (
            {group, "*"} & set(rule["apiGroups"])
            and {resource, "*"} & set(rule["resources"])
            and {operation, "*"} & set(rule["operations"])
        ):
            return True
    return False
