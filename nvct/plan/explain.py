"""``nvct-cli explain``: what nvct would inject into one container, and why.

The same request parsing and decision as the shim and the hook (``request_from_spec`` /
``parse_request`` and ``nvct.plan.decide``); only requirements are not enforced, so a failing
one is shown next to everything else instead of stopping at the first error.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvct.base.errors import NvctError, SpecError
from nvct.config import Config
from nvct.host.arch import Arch
from nvct.host.inventory import Inventory
from nvct.plan.decide import CdiOrdered, NoGpu, Refused, decide
from nvct.plan.model import Plan, RootfsLayout
from nvct.request.inputs import env_map, is_privileged, mount_pairs
from nvct.request.parse import Request, parse_request, request_from_spec

if TYPE_CHECKING:
    from nvct.base.order import WorkOrder

SYS_ADMIN = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL"})


@dataclass(frozen=True, slots=True)
class ContainerInput:
    """A container's request material: env, mount destinations, privilege, its rootfs."""

    source: str
    env: Mapping[str, str]
    mounts: tuple[tuple[str, str], ...] = ()  # (source, destination)
    privileged: bool = True
    rootfs: Path | None = None
    spec: Mapping[str, Any] | None = None  # the OCI spec, when there is one
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LayoutChoice:
    """The rootfs layout the hook would use, and what it was decided from."""

    layout: RootfsLayout
    reason: str


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything ``explain`` prints."""

    input: ContainerInput
    layout: LayoutChoice
    request: Request | None = None
    plan: Plan | None = None
    cdi: WorkOrder | None = None  # what nvct-runtime gives for CDI device names
    error: str = ""  # one line, as the hook would print it
    notes: tuple[str, ...] = field(default=())
    libcuda: str = ""  # which libcuda the container loads, and why (CUDA forward compatibility)

    @property
    def failed_requirements(self) -> int:
        """How many (requirement, GPU) checks fail."""
        return sum(not r.satisfied for r in self.plan.requirements) if self.plan else 0

    @property
    def ok(self) -> bool:
        """True when the hook would start this container."""
        return not self.error and not self.failed_requirements


def input_from_env(pairs: Sequence[str], *, privileged: bool = True) -> ContainerInput:
    """``--env K=V`` pairs.

    Raises:
        SpecError: a pair has no ``=``.
    """
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise SpecError(
            f"--env {bad[0]!r} is not KEY=VALUE", hint="e.g. --env NVIDIA_VISIBLE_DEVICES=0"
        )
    return ContainerInput(
        source="--env", env=env_map(pairs), privileged=privileged, notes=("no image given",)
    )


def input_from_bundle(bundle: Path, spec: Mapping[str, Any]) -> ContainerInput:
    """An OCI bundle's ``config.json`` (already loaded) and its rootfs."""
    root = spec.get("root")
    path = root.get("path") if isinstance(root, Mapping) else None
    rootfs = None
    if isinstance(path, str) and path:
        rootfs = Path(path) if path.startswith("/") else bundle / path
    process = spec.get("process") or {}
    return ContainerInput(
        source=f"bundle {bundle}",
        env=env_map(process.get("env") or ()),
        mounts=tuple(mount_pairs(spec)),
        privileged=is_privileged(spec),
        rootfs=rootfs,
        spec=spec,
    )


def input_from_inspect(data: Mapping[str, Any]) -> ContainerInput:
    """One object of ``docker inspect``: Config.Env, HostConfig privileges and GPU requests,
    Mounts, and the merged rootfs while the container runs."""
    config = data.get("Config") or {}
    host = data.get("HostConfig") or {}
    env_list = list(config.get("Env") or ())
    notes = []
    # dockerd's --gpus: its nvidia device driver appends these to the OCI spec's env.
    for req in host.get("DeviceRequests") or ():
        caps = {c for group in req.get("Capabilities") or () for c in group}
        if "gpu" not in caps:
            continue
        ids = req.get("DeviceIDs") or []
        count = req.get("Count", 0)
        devices = (
            ",".join(ids) if ids else "all" if count == -1 else ",".join(map(str, range(count)))
        )
        env_list.append(f"NVIDIA_VISIBLE_DEVICES={devices}")
        driver_caps = sorted(caps - {"gpu", "nvidia"})
        if driver_caps:
            env_list.append(f"NVIDIA_DRIVER_CAPABILITIES={','.join(driver_caps)}")
        notes.append(f"--gpus request: dockerd sets NVIDIA_VISIBLE_DEVICES={devices}")
    cap_add = {str(c).upper() for c in host.get("CapAdd") or ()}
    privileged = bool(host.get("Privileged")) or bool(cap_add & SYS_ADMIN)
    merged = ((data.get("GraphDriver") or {}).get("Data") or {}).get("MergedDir")
    name = str(data.get("Name", "")).lstrip("/") or str(data.get("Id", ""))[:12]
    runtime = host.get("Runtime") or "default"
    return ContainerInput(
        source=f"container {name} (runtime {runtime})",
        env=env_map(env_list),
        mounts=tuple(
            (str(m.get("Source", "")), str(m.get("Destination", "")))
            for m in data.get("Mounts") or ()
        ),
        privileged=privileged,
        rootfs=Path(merged) if merged else None,
        notes=tuple(notes),
    )


def choose_layout(inp: ContainerInput) -> LayoutChoice:
    """Debian multiarch or lib64 dirs, decided exactly as the hook does (inside the rootfs)."""
    if inp.rootfs is None:
        return LayoutChoice(RootfsLayout(), "no rootfs to look at: Debian layout assumed")
    if not inp.rootfs.is_dir():
        return LayoutChoice(RootfsLayout(), f"rootfs {inp.rootfs} not found: Debian layout assumed")
    from nvct.container.rootfs import Rootfs

    with Rootfs(str(inp.rootfs)) as view:
        debian = view.exists("/etc/debian_version")
    if debian:
        return LayoutChoice(RootfsLayout(debian=True), "/etc/debian_version exists in the rootfs")
    return LayoutChoice(RootfsLayout(debian=False), "no /etc/debian_version in the rootfs")


def explain(
    inp: ContainerInput,
    config: Config,
    inventory: Callable[[], Inventory],
    arch: Arch,
) -> Explanation:
    """The plan for ``inp`` with every failure captured (never raises NvctError)."""
    layout = choose_layout(inp)
    try:
        if inp.spec is not None:
            request = request_from_spec(inp.spec, config)
        else:
            request = parse_request(
                inp.env, mounts=inp.mounts, privileged=inp.privileged, config=config
            )
    except NvctError as err:
        return Explanation(inp, layout, error=err.one_line())
    decision = decide(
        request,
        config,
        lambda: layout.layout,
        library_dirs="show",
        inventory=inventory,
        arch=arch,
        enforce_requirements=False,
    )
    problems = decision.problems if isinstance(decision, CdiOrdered | Refused) else ()
    notes = tuple(f"CDI spec not used: {p}" for p in problems)
    if isinstance(decision, Refused):
        return Explanation(inp, layout, request, error=decision.error.one_line(), notes=notes)
    if isinstance(decision, CdiOrdered):
        return Explanation(inp, layout, request, cdi=decision.order, notes=notes)
    if isinstance(decision, NoGpu):
        return Explanation(inp, layout, request)
    plan = decision.planned.plan
    return Explanation(inp, layout, request, plan, libcuda=_libcuda(inp, plan, config))


def _libcuda(inp: ContainerInput, plan: Plan, config: Config) -> str:
    """Which libcuda the container will load, decided as the shim and the hook decide it."""
    from nvct.container.cuda_compat import choose_compat, compat_names
    from nvct.container.rootfs import Rootfs
    from nvct.plan.workorder import cuda_compat

    wanted = cuda_compat(plan, config)
    if wanted is None:
        if config.inject.cuda_compat == "off" and "compute" in plan.request.capabilities:
            return "the host driver's (inject.cuda-compat is off: no compat libcuda is used)"
        return ""  # no libcuda, or no GPU: nothing to choose
    host_driver, datacenter = wanted
    if inp.rootfs is None or not inp.rootfs.is_dir():
        return (
            f"the host driver's libcuda.so.{host_driver}, unless the image has a newer "
            "/usr/local/cuda/compat/libcuda.so.* (not checked: no image given)"
        )
    with Rootfs(str(inp.rootfs)) as view:
        return choose_compat(compat_names(view), host_driver, datacenter)[1]


def _cdi_lines(order: WorkOrder) -> list[str]:
    lines = ["CDI devices (nvct-runtime applies their specs' edits, as a CDI engine would):"]
    lines += [f"  {name}  from {path}" for name, path in order.get("cdi", ())]
    if order["devices"]:
        lines.append("Device nodes:")
        lines += [f"  {p}  c {major}:{minor}" for p, major, minor, _ in order["devices"]]
    if order["mounts"]:
        lines.append("Mounts (container path <- host path):")
        lines += [f"  {target}  <- {source}" for source, target, _ in order["mounts"]]
    if order.get("env"):
        lines.append(f"Environment: {' '.join(order['env'])}")
    for stage, hook in order.get("hooks", ()):
        lines.append(f"Hook {stage}: {' '.join(map(str, hook.get('args') or [hook['path']]))}")
    if order.get("additional_gids"):
        lines.append(f"Additional groups: {', '.join(map(str, order['additional_gids']))}")
    return lines


def docker_inspect(container: str, run: Callable[[Sequence[str]], Any], host: str | None) -> Any:
    """``docker inspect <container>``'s first object.

    Raises:
        SpecError: docker fails or prints something else than a JSON list of objects.
    """
    done = run(
        ["docker", *(["-H", host] if host else []), "inspect", "--type", "container", container]
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SpecError(
            f"docker inspect {container} failed: {last}",
            hint="check the container name or id, and that dockerd runs (or --docker-host)",
        )
    try:
        data = json.loads(done.stdout)
    except ValueError as err:
        raise SpecError(f"docker inspect {container} did not print JSON ({err})") from err
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise SpecError(f"docker inspect {container} printed no container object")
    return data[0]


def explanation_to_dict(exp: Explanation, arch: Arch) -> dict[str, Any]:
    """The ``--json`` document: the input, policy decisions, layout and the whole plan."""
    from nvct.plan.render import plan_to_dict

    req = exp.request
    return {
        "ok": exp.ok,
        "error": exp.error or None,
        "source": exp.input.source,
        "privileged": exp.input.privileged,
        "notes": [*exp.input.notes, *exp.notes],
        "request": None
        if req is None
        else {
            "visible": req.visible,
            "devices": list(req.devices),
            "capabilities": sorted(req.capabilities),
            "source": req.source,
            "requirements": [f"{r.source}={r.expression}" for r in req.requirements],
        },
        "decisions": list(req.decisions) if req else [],
        "layout": {
            "debian": exp.layout.layout.debian,
            "lib_dir": exp.layout.layout.lib_dir(arch),
            "lib32_dir": exp.layout.layout.lib32_dir(arch),
            "reason": exp.layout.reason,
        },
        "plan": plan_to_dict(exp.plan) if exp.plan else None,
        "cdi": exp.cdi,
        "libcuda": exp.libcuda or None,
    }


def explanation_to_text(exp: Explanation, arch: Arch) -> list[str]:
    """Human-readable explanation, one finding per line, reasons on the right."""
    inp, req, plan = exp.input, exp.request, exp.plan
    lines = [f"Container: {inp.source}, {'privileged' if inp.privileged else 'unprivileged'}"]
    lines += [f"  note: {n}" for n in inp.notes]
    if req is not None:
        if req.wants_gpu:
            shown = ", ".join(req.devices) if req.visible == "list" else req.visible
            lines.append(f"  devices:      {shown} (from {req.source})")
            lines.append(f"  capabilities: {', '.join(sorted(req.capabilities)) or 'none'}")
        else:
            lines.append("  no GPU asked for: nvct leaves this container alone")
        if req.decisions:
            lines.append("Policy decisions:")
            lines += [f"  - {d}" for d in req.decisions]
    layout = exp.layout.layout
    lines.append(
        f"Rootfs layout: {'Debian multiarch' if layout.debian else 'lib64'} ({exp.layout.reason}):"
        f" libraries go to {layout.lib_dir(arch)}, 32-bit ones to {layout.lib32_dir(arch)}"
    )
    if plan is not None:
        lines += _plan_lines(plan)
    if exp.cdi is not None:
        lines += _cdi_lines(exp.cdi)
    lines += [f"  note: {n}" for n in exp.notes]
    if exp.libcuda:
        lines.append(f"libcuda: {exp.libcuda}")
    if exp.error:
        lines.append(f"FAIL {exp.error}")
    elif exp.failed_requirements:
        lines.append(
            f"FAIL {exp.failed_requirements} requirement check(s) not met: the hook would refuse "
            "this container (fix: a newer host driver, an image built for an older CUDA, "
            "or NVIDIA_DISABLE_REQUIRE=true)"
        )
    elif req is not None and req.wants_gpu:
        lines.append("OK: the hook would start this container with the above")
    return lines


def _plan_lines(plan: Plan) -> list[str]:
    lines = []
    if plan.selected:
        lines.append("Selected:")
        lines += [
            f"  {s.label:<10} {(s.mig or s.gpu).uuid}  (asked as {s.token!r})"
            for s in plan.selected
        ]
    if plan.requirements:
        lines.append("Requirements:")
        lines += [
            f"  {'PASS' if r.satisfied else 'FAIL'} {r.source}={r.expression!r} on {r.where}: "
            f"{r.detail}"
            for r in plan.requirements
        ]
    if plan.devices:
        width = max(len(d.node.path) for d in plan.devices)
        numbers = [f"c {d.node.major}:{d.node.minor}" for d in plan.devices]
        nwidth = max(map(len, numbers))
        lines.append("Device nodes:")
        lines += [
            f"  {d.node.path:<{width}}  {n:<{nwidth}}  {d.reason}"
            for d, n in zip(plan.devices, numbers, strict=True)
        ]
    if plan.mounts:
        width = max(len(m.target) for m in plan.mounts)
        lines.append("Mounts (container path <- host path, why):")
        libdirs = {d.target: d for d in plan.library_dirs}
        for m in plan.mounts:
            lines.append(f"  {m.target:<{width}}  <- {m.source}  ({m.reason})")
            if m.kind == "libdir" and m.target in libdirs:
                d = libdirs[m.target]
                how = "copy" if d.copies else "hard link"
                lines += [f"      {name}  ({how} of {source})" for source, name in d.files]
                lines += [f"      {name} -> {target}  (link)" for name, target in d.links]
    if plan.binary_links:
        lines.append(
            "Binaries (links into the library directory; bound where the image has its own):"
        )
        width = max(len(b.path) for b in plan.binary_links)
        lines += [f"  {b.path:<{width}}  -> {b.target}  ({b.reason})" for b in plan.binary_links]
    if plan.symlinks:
        lines.append("Symlinks:")
        lines += [f"  {s.path} -> {s.target}  ({s.reason})" for s in plan.symlinks]
    if plan.ldconfig_dirs:
        lines.append(f"ldconfig (host's, in the container) over: {', '.join(plan.ldconfig_dirs)}")
    if plan.notes:
        lines.append("Left out (on the host, not given to this container):")
        lines += [f"  - {n}" for n in plan.notes]
    return lines
