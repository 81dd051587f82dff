"""Bearer tokens and an RBAC-like rule table: who may do which verb on which resource.

A token maps to a user, the user's ``extra`` (what a pod's bound token adds, e.g.
``authentication.kubernetes.io/node-name``: admission policies read it) and rules
(``Rule("", "nodes", {"get", "list", "watch"})`` is the config-manager's ClusterRole rule). A
request without a known token is 401; a verb no rule allows is 403 with the API server's
message. Every request is recorded, so a test can show what a client used.
"""

from __future__ import annotations

from dataclasses import dataclass, field

ALL_VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete"})


@dataclass(frozen=True)
class Rule:
    api_group: str
    resource: str
    verbs: frozenset[str]

    def allows(self, group: str, resource: str, verb: str) -> bool:
        return (
            self.api_group in ("*", group)
            and self.resource in ("*", resource)
            and (verb in self.verbs or "*" in self.verbs)
        )


ADMIN = (Rule("*", "*", frozenset({"*"})),)


@dataclass(frozen=True)
class Access:
    user: str
    verb: str
    group: str
    resource: str
    allowed: bool


@dataclass
class Authorizer:
    tokens: dict[str, tuple[str, tuple[Rule, ...]]] = field(default_factory=dict)
    extras: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    log: list[Access] = field(default_factory=list)
    # requests refused for want of a known token (401)
    unauthenticated: int = 0

    def add(
        self,
        token: str,
        user: str,
        rules: tuple[Rule, ...],
        extra: dict[str, list[str]] | None = None,
    ) -> None:
        self.tokens[token] = (user, rules)
        self.extras[token] = extra or {}

    def user_info(self, token: str) -> dict[str, object]:
        """The request's ``userInfo`` as admission sees it."""
        return {"username": self.tokens[token][0], "extra": self.extras.get(token, {})}

    def user(self, token: str | None) -> str | None:
        entry = self.tokens.get(token or "")
        if entry is None:
            self.unauthenticated += 1
            return None
        return entry[0]

    def check(self, token: str, verb: str, group: str, resource: str) -> bool:
        user, rules = self.tokens[token]
        allowed = any(r.allows(group, resource, verb) for r in rules)
        self.log.append(Access(user, verb, group, resource, allowed))
        return allowed

    def used_by(self, user: str) -> set[tuple[str, str, str]]:
        """(verb, group, resource) of every request ``user`` made."""
        return {(a.verb, a.group, a.resource) for a in self.log if a.user == user}
