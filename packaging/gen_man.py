"""Write nvct's man pages (roff) from the CLI's own help text, so they never drift from it.

    python3 -IS packaging/gen_man.py --lib STAGED_LIB --config config/config.toml --out MANDIR

``--lib`` is the staged private tree (nvct and its vendored click). Pages:

- nvct-cli.1: every command of ``nvct.cli.main:cli``, walked through click (subcommands are
  lazy: one that fails to import is reported on stderr and left out, not a build failure);
- nvct-runtime.1 and nvct-hook.1: written here (they are not click programs);
- nvct-config-manager.1: written here (its flags are NVIDIA config-manager's);
- nvct-device-plugin.1: written here too (its click command imports grpc, compiled for the
  target's Python, which the build host's may not be);
- nvct-config.toml.5: the shipped config.toml, which documents every key and its default.

The date is $SOURCE_DATE_EPOCH's (dpkg-buildpackage sets it from debian/changelog), so the
pages are reproducible.
"""

from __future__ import annotations

import argparse
import datetime
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

SUMMARY = "inspect, configure and diagnose GPU injection into containers"
SEE_ALSO = (
    ("nvct-cli", 1),
    ("nvct-runtime", 1),
    ("nvct-hook", 1),
    ("nvct-device-plugin", 1),
    ("nvct-config-manager", 1),
    ("nvct-dra-plugin", 1),
    ("nvct-config.toml", 5),
)
FILES = (
    ("/etc/nvct/config.toml", "nvct's configuration (see nvct-config.toml(5))."),
    ("/var/cache/nvct", "Cached driver inventory, keyed by the driver's identity."),
    ("/var/log/nvct.log", "JSON-lines event log of nvct-runtime and nvct-hook."),
    ("/run/nvct/shim.sock", "Socket of the shim daemon (nvct-runtime-daemon.service)."),
)
ENVIRONMENT = (
    ("NVCT_CONFIG", "Path of the config file to read instead of /etc/nvct/config.toml."),
    (
        "NVIDIA_VISIBLE_DEVICES",
        "In a container's environment: the GPUs it gets (indices, UUIDs, all, none, void).",
    ),
    (
        "NVIDIA_DRIVER_CAPABILITIES",
        "In a container's environment: driver capabilities to inject (utility, compute, ...).",
    ),
)


def esc(text: str) -> str:
    """Escape text for roff: backslashes, hyphens, and control characters at line starts."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\n".join(
        "\\&" + line if line.startswith((".", "'")) else line for line in text.split("\n")
    )


def paragraphs(text: str) -> list[str]:
    """Paragraphs of a help text; click's ``\\b`` (no-rewrap) markers dropped."""
    text = inspect.cleandoc(text or "")
    paras = re.split(r"\n\s*\n", text)
    return [p.replace("\b\n", "").replace("\b", "").strip() for p in paras if p.strip()]


class Page:
    def __init__(self, name: str, section: int, date: str, version: str) -> None:
        self.lines = [
            f'.TH "{name.upper()}" "{section}" "{date}" "nvct {version}" "nvct manual"',
        ]

    def sh(self, title: str) -> None:
        self.lines.append(f".SH {title}")

    def para(self, text: str) -> None:
        self.lines += [".PP", esc(text)]

    def item(self, tag: str, text: str) -> None:
        self.lines += [".TP", f"\\fB{esc(tag)}\\fR", esc(text)]

    def literal(self, text: str) -> None:
        self.lines += [".PP", ".nf", esc(text.rstrip("\n")), ".fi"]

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def common_tail(self, name: str) -> None:
        self.sh("ENVIRONMENT")
        for var, text in ENVIRONMENT:
            self.item(var, text)
        self.sh("FILES")
        for path, text in FILES:
            self.item(path, text)
        self.sh("SEE ALSO")
        refs = [f"\\fB{esc(n)}\\fR({s})" for n, s in SEE_ALSO if n != name]
        self.lines.append(",\n".join(refs))


def click_options(page: Page, command: Any, ctx: Any) -> None:
    for param in command.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is not None:
            page.item(record[0], record[1] or "")


def click_commands(page: Page, group: Any, ctx: Any, prefix: str) -> None:
    """One subsection per (sub)command, recursively."""
    import click

    for name in group.list_commands(ctx):
        try:
            command = group.get_command(ctx, name)
        except Exception as err:  # lazy import of another module: report, do not abort
            print(f"gen_man: skipping '{prefix} {name}': {err}", file=sys.stderr)
            continue
        if command is None or command.hidden:
            continue
        sub = click.Context(command, info_name=name, parent=ctx)
        full = f"{prefix} {name}"
        usage = " ".join(command.collect_usage_pieces(sub))
        page.lines.append(f".SS {esc(full)}")
        page.lines += [".PP", f"\\fB{esc(full)}\\fR {esc(usage)}"]
        for para in paragraphs(command.help or command.short_help or ""):
            page.para(para)
        if isinstance(command, click.Group):
            click_commands(page, command, sub, full)
        else:
            click_options(page, command, sub)


def cli_page(date: str, version: str) -> str:
    import click

    from nvct.cli.main import cli

    page = Page("nvct-cli", 1, date, version)
    ctx = click.Context(cli, info_name="nvct-cli")
    page.sh("NAME")
    page.lines.append(
        "nvct\\-cli \\- inspect, configure and diagnose GPU injection into containers"
    )
    page.sh("SYNOPSIS")
    page.lines.append(f"\\fBnvct\\-cli\\fR {esc(' '.join(cli.collect_usage_pieces(ctx)))}")
    page.sh("DESCRIPTION")
    for para in paragraphs(cli.help or ""):
        page.para(para)
    page.para(
        "Configuring a container engine is an explicit step; the packages never edit an "
        "engine's configuration. For example: nvct-cli configure --runtime docker"
    )
    page.sh("OPTIONS")
    click_options(page, cli, ctx)
    page.sh("COMMANDS")
    click_commands(page, cli, ctx, "nvct-cli")
    page.common_tail("nvct-cli")
    return page.text()


def program_page(
    name: str, summary: str, synopsis: str, description: str, date: str, version: str
) -> str:
    page = Page(name, 1, date, version)
    page.sh("NAME")
    page.lines.append(f"{esc(name)} \\- {esc(summary)}")
    page.sh("SYNOPSIS")
    page.lines.append(esc(synopsis))
    page.sh("DESCRIPTION")
    for para in paragraphs(description):
        page.para(" ".join(para.split()))
    page.common_tail(name)
    return page.text()


def config_page(config_text: str, date: str, version: str) -> str:
    page = Page("nvct-config.toml", 5, date, version)
    page.sh("NAME")
    page.lines.append(
        "nvct\\-config.toml \\- configuration of nvct\\-runtime, nvct\\-hook, nvct\\-cli"
    )
    page.sh("SYNOPSIS")
    page.lines.append("/etc/nvct/config.toml")
    page.sh("DESCRIPTION")
    page.para(
        "A TOML file. Every key is optional: defaults live in nvct's code, and the installed "
        "file shows each key commented out with its default. Unknown keys and wrong types are "
        "errors that name the key. Override the file's location with $NVCT_CONFIG or --config. "
        "The installed file, which documents every key, follows."
    )
    page.literal(config_text)
    page.common_tail("nvct-config.toml")
    return page.text()


RUNTIME_DESCRIPTION = """
nvct-runtime is an OCI runtime that a container engine calls instead of runc. On create (and
run) it reads the container's config.json, selects the GPUs it asks for (NVIDIA_VISIBLE_DEVICES,
or the device plugin's volume mounts when the configuration accepts them), checks its
NVIDIA_REQUIRE_* requirements, adds the GPUs' device nodes and device cgroup rules to the spec,
adds nvct-hook as a prestart hook, and then runs runc (or crun). Every other call goes straight
to the low-level runtime, and a container that asks for no GPU is left untouched.

Register it with a container engine as the runtime named nvidia (docker: "runtimes" in
/etc/docker/daemon.json; containerd and CRI-O: their runtime tables), for example with
nvct-cli configure --runtime docker. It accepts every runc argument and passes them on;
--nvct-config PATH (given through the engine's runtime arguments) selects nvct's config file.

/usr/bin/nvct-runtime is a small native program. It hands a GPU container's create to the shim
daemon (/usr/libexec/nvct/nvct-runtime-daemon, run by the systemd service
nvct-runtime-daemon.service, listening on /run/nvct/shim.sock), which prepares the bundle with
its modules already loaded. When no daemon answers, or the daemon runs other nvct code than
nvct-runtime was built with (an upgrade it has not been restarted for: systemctl restart
nvct-runtime-daemon), nvct-runtime runs the Python shim itself: slower, same result.
"""
HOOK_DESCRIPTION = """
nvct-hook prestart runs before the container's process starts. It reads the OCI state on
standard input, works out the same plan as nvct-runtime did, and carries it out in the
container's root: it mounts the driver's libraries, binaries, firmware and IPC sockets that
the container's capabilities need (every path resolved inside the container's root), creates
the libraries' symlinks, and runs the host's ldconfig chrooted into the container. If any step
fails the container does not start, and the error says what to fix. The poststart and poststop
stages do nothing.

nvct-runtime adds this hook to the containers that ask for GPUs. It is also installed as
nvidia-container-runtime-hook, the name docker's --gpus option looks up, and podman and CRI-O
run it through /usr/share/containers/oci/hooks.d/ when the nvct-oci-hook package is installed.
"""


CDI_HOOK_DESCRIPTION = """
The container engine (podman, containerd, CRI-O, docker with CDI) runs nvct-cdi-hook as the
createContainer hook that a CDI spec from nvct-cli cdi generate names, with the OCI state on
standard input. Inside the container's root it creates the driver library symlinks a spec cannot
express (--symlink TARGET::LINK), then the ld.so.cache: the entries ldconfig would add for the
spec's libraries, which the spec passes in the hook's NVCT_LD_CACHE_ENTRIES variable, merged into
the image's own cache; where they cannot be (no entries, no cache in the image, one the merge
cannot match ldconfig on) it runs the host's ldconfig (--ldconfig) chrooted on the library
directories (--ldconfig-dir). With --ld-conf DIR (the driver's libraries bound as one
directory: cdi generate --library-mounts directory) it lists DIR in the image's
/etc/ld.so.conf.d/000-nvidia-driver.conf, so that an ldconfig the container runs later keeps
them. Every path is resolved inside the container's root, and no program of the image runs.
The installed nvct-cdi-hook is a native program that does this without starting Python; what it
does not take (a kernel without openat2, a cache to make with ldconfig) it hands, unchanged, to
the Python hook in /usr/libexec/nvct.
It exits 0 on success, and otherwise with one line on standard error, which fails the
container's start.
"""


DEVICE_PLUGIN_DESCRIPTION = """
nvct-device-plugin is a Kubernetes device plugin: it advertises the node's NVIDIA GPUs to the
kubelet as the extended resource nvidia.com/gpu (and, per mig-strategy, MIG devices as
nvidia.com/gpu or nvidia.com/mig-<profile>), with each device's health and NUMA node, and answers
the kubelet's Allocate and GetPreferredAllocation calls. It serves one socket per resource in
the kubelet's device-plugins directory (default /var/lib/kubelet/device-plugins), then registers
with the kubelet through kubelet.sock there; it waits for kubelet.sock when there is none yet,
and serves and registers again whenever the kubelet restarts. Before registering it writes the
CDI spec its answers name (nvct-device-plugin.json in /var/run/cdi). SIGTERM removes its
sockets and exits 0.

Settings come from the [device-plugin] table of nvct's config.toml (see nvct-config.toml(5)):
mig-strategy, device-id-strategy, device-list-strategy (cdi-cri, cdi-annotations, envvar,
volume-mounts), plugin-dir, cdi-spec-dir, sysfs-root, fail-on-init-error, quiet-period and
ignored-xids. A flag of the same name overrides each; --config PATH reads another file, and
--driver-root, --dev-root and --proc-root locate the driver as for nvct-cli. nvct-device-plugin
--help lists them.

The packages install it with the systemd unit nvct-device-plugin.service, which they do not
enable: on a node whose kubelet runs on the host, systemctl enable --now nvct-device-plugin.
In a cluster, nvct's image runs it as a DaemonSet instead. nvct-cli device-plugin-status shows
each advertised device with its health, and nvct-cli doctor checks the plugin's sockets.

Logs are JSON lines on standard output (the journal, or the pod's log). A bad config or flag
exits 2 with one line on standard error; NVML failing at start exits 1 (or, with
fail-on-init-error = false, keeps retrying while advertising nothing). The packages' gRPC
libraries (/usr/lib/nvct/grpc) are compiled for the Python they were built for: under another
Python it exits 1 with one line naming both and the fix.
"""


CONFIG_MANAGER_DESCRIPTION = """
nvct-config-manager gives each node the device plugin config its Node's label names, as NVIDIA's
config-manager does, so the plugin itself needs no Kubernetes API access. It watches its Node
(NODE_NAME) through the Kubernetes API (in-cluster: the service account's token and CA; or
KUBECONFIG), reads the label NODE_LABEL (default nvidia.com/device-plugin.config), picks that
entry of the ConfigMap mounted at CONFIG_FILE_SRCDIR, writes it atomically to CONFIG_FILE_DST
and sends SIGNAL (default 1, SIGHUP) to the process named PROCESS_TO_SIGNAL (default
nvct-device-plugin; the pod shares one PID namespace). An unset label takes DEFAULT_CONFIG, else
the FALLBACK_STRATEGIES in order: named (the entry called default), single (the only entry),
empty (an empty file: the plugin's defaults). ONESHOT=true writes once and exits (the init
container); SEND_SIGNAL=false signals nothing. Each variable has the flag of the same name
(--node-name, --config-file-dst, ...). The service account needs get, list and watch on nodes.

Logs are JSON lines on standard output. A label naming a missing entry is one line on standard
error: the init container exits 1, the sidecar keeps the last good config and waits for the
next change. A token or rules the API server refuses exit 1 with one line; a lost API server
is retried.
"""


DRA_PLUGIN_DESCRIPTION = """
nvct-dra-plugin is the kubelet side of Dynamic Resource Allocation (resource.k8s.io/v1) for the
node's NVIDIA GPUs: one DRA device per whole GPU and per MIG device, driver gpu.nvct.io. It
serves the kubelet's plugin registration socket (<driver>-reg.sock in --registry-dir, default
/var/lib/kubelet/plugins_registry) and the DRA service, versions v1 and v1beta1, on
<plugins-dir>/<driver>/dra.sock. For each claim the kubelet asks it to prepare, it reads the
ResourceClaim from the API server (in-cluster, or KUBECONFIG; the service account needs get on
resourceclaims), writes a CDI spec of the claim's devices (nvct-dra-claim-<uid>.json in
--cdi-root, default /var/run/cdi, kind k8s.gpu.nvct.io/claim) and answers its CDI ids; unprepare
removes it. Prepared claims are kept in <plugins-dir>/<driver>/checkpoint.json, so retries get the
same answer and a restarted plugin unprepares what it prepared. NODE_NAME (--node-name) is
required: it is the pool of the node's devices.

A claim's opaque config (apiVersion dra.nvct.io/v1alpha1, kind GpuConfig) chooses its sharing;
what nvct cannot apply is refused at prepare with one line in the claim's error. The engine must
apply CDI devices from the CRI (containerd 1.7 with CDI on, containerd 2, CRI-O): the kubelet
hands DRA's devices to it only that way. Logs are JSON lines on standard output; a start that
fails (no driver, an unreadable checkpoint, no API access) exits 1 with one line on standard
error.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--lib", required=True, type=Path, help="staged private tree")
    parser.add_argument("--config", required=True, type=Path, help="config/config.toml")
    parser.add_argument("--out", required=True, type=Path, help="man directory (…/share/man)")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.lib.absolute()))
    from nvct._version import __version__ as version

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or 0) or None
    when = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc) if epoch else None
    date = (when or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d")
    pages = {
        "man1/nvct-cli.1": cli_page(date, version),
        "man1/nvct-runtime.1": program_page(
            "nvct-runtime",
            "OCI runtime shim that gives containers the NVIDIA GPUs they ask for",
            "nvct-runtime [--nvct-config PATH] RUNC-ARGUMENTS...",
            RUNTIME_DESCRIPTION,
            date,
            version,
        ),
        "man1/nvct-hook.1": program_page(
            "nvct-hook",
            "OCI prestart hook that mounts the NVIDIA driver into a container",
            "nvct-hook prestart   (the OCI state is read on standard input)",
            HOOK_DESCRIPTION,
            date,
            version,
        ),
        "man1/nvct-cdi-hook.1": program_page(
            "nvct-cdi-hook",
            "createContainer hook of the CDI specs that nvct-cli cdi generate writes",
            "nvct-cdi-hook [--ldconfig PATH] [--symlink TARGET::LINK]... [--ldconfig-dir DIR]... "
            "[--ld-conf DIR]...",
            CDI_HOOK_DESCRIPTION,
            date,
            version,
        ),
        "man1/nvct-device-plugin.1": program_page(
            "nvct-device-plugin",
            "Kubernetes device plugin that advertises NVIDIA GPUs to the kubelet",
            "nvct-device-plugin [--config PATH] [--plugin-dir DIR] [OPTIONS]",
            DEVICE_PLUGIN_DESCRIPTION,
            date,
            version,
        ),
        "man1/nvct-config-manager.1": program_page(
            "nvct-config-manager",
            "per-node config for the device plugin, chosen by the Node's label",
            "nvct-config-manager [--node-name NAME] [--config-file-srcdir DIR] "
            "[--config-file-dst FILE] [OPTIONS]",
            CONFIG_MANAGER_DESCRIPTION,
            date,
            version,
        ),
        "man1/nvct-dra-plugin.1": program_page(
            "nvct-dra-plugin",
            "Kubernetes DRA kubelet plugin that prepares NVIDIA GPUs for claims",
            "nvct-dra-plugin --node-name NAME [--config PATH] [--cdi-root DIR] [OPTIONS]",
            DRA_PLUGIN_DESCRIPTION,
            date,
            version,
        ),
        "man5/nvct-config.toml.5": config_page(args.config.read_text(), date, version),
    }
    for rel, text in pages.items():
        path = args.out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
