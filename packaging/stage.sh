#!/bin/sh
# Stage nvct's installed file tree under DESTDIR: the one source of truth for the .deb and the .rpm.
#
#   packaging/stage.sh DESTDIR [PYTHON [WHEELHOUSE]]
#
# Run from the source tree's root. PYTHON is the interpreter the installed launchers use
# (default /usr/bin/python3; the EL builds pass /usr/bin/python3.11); WHEELHOUSE holds the wheels
# pinned in packaging/vendor.txt (default packaging/build/wheelhouse, filled by
# `make -C packaging wheelhouse`). Nothing here touches the network: the wheels are installed
# with --no-index. The build itself runs with $BUILD_PYTHON (default /usr/bin/python3, which
# needs flit_core: Debian's `flit` package) and compiles the native launcher with $CC (default
# cc) and $CPPFLAGS $CFLAGS $LDFLAGS (debian/rules exports dpkg-buildflags'; the spec passes
# %{build_cflags} and %{build_ldflags}). The systemd units go to $SYSTEMD_UNITDIR (default
# /usr/lib/systemd/system; Debian 12's debhelper and lintian want /lib/systemd/system).
# grpcio is compiled per CPython: WHEELHOUSE/grpc holds the wheels of packaging/vendor-grpc.txt
# for PYTHON's version, which is $NVCT_PYTHON_VERSION (X.Y) when set, else PYTHON's own answer,
# else read from a name like python3.11; the platform is $GRPC_PLATFORM (default
# manylinux2014_<this machine's architecture>).
#
# Layout:
#   /usr/share/nvct/lib/            nvct and its vendored pure-Python dependencies (no .pyc:
#                                   the package scripts byte-compile for the target's Python)
#   /usr/lib/nvct/grpc/             grpcio, protobuf, typing_extensions (vendor-grpc.txt) for
#                                   PYTHON's version and this architecture
#   /usr/bin/nvct-cli, /usr/libexec/nvct/nvct-hook, /usr/libexec/nvct/nvct-cdi-hook
#                                   launchers: PYTHON -IS with only the private tree added
#                                   (nvct-cli also appends /usr/lib/nvct/grpc)
#   /usr/bin/nvct-hook              native prestart hook (nvct/runtime/launch/hook.c, an ELF): the
#                                   shim daemon does its work, else /usr/libexec/nvct/nvct-hook
#   /usr/bin/nvct-cdi-hook          native createContainer hook of CDI specs (cdihook.c, an ELF);
#                                   what it does not take, /usr/libexec/nvct/nvct-cdi-hook does
#   /usr/bin/nvct-device-plugin     the Kubernetes device plugin (private tree + grpc), run by
#   $SYSTEMD_UNITDIR/nvct-device-plugin.service   (packaging/nvct-device-plugin.service)
#   $SYSTEMD_UNITDIR/nvct-mps-control.service     (packaging/nvct-mps-control.service)
#   /usr/bin/nvct-config-manager    the per-node config sidecar (private tree + the grpc
#                                   directory, for lightkube's compiled msgspec)
#   /usr/bin/nvct-dra-plugin        DRA's kubelet plugin (private tree + grpc, lightkube)
#   /usr/bin/nvct-runtime           native launcher (nvct/runtime/launch/launcher.c, an ELF): runc
#                                   directly, or for a GPU create the shim daemon, else
#                                   /usr/libexec/nvct/nvct-runtime (Python)
#   /usr/libexec/nvct/nvct-runtime-daemon   the shim daemon (Python), run by
#   $SYSTEMD_UNITDIR/nvct-runtime-daemon.service   (packaging/nvct-runtime-daemon.service)
#   $SYSTEMD_UNITDIR/nvct-cdi-refresh.{service,path}   regenerate /var/run/cdi/nvidia.yaml at
#                                   boot and when the driver changes (packaging/nvct-cdi-refresh.*)
#   /usr/bin/nvidia-container-runtime-hook -> nvct-hook   (the name dockerd's --gpus looks up)
#   /etc/nvct/config.toml           config/config.toml (every key commented; defaults in code)
#   /usr/share/containers/oci/hooks.d/*.json   hooks/*.json (podman / CRI-O hooks.d)
#   /usr/share/man/man1, man5       generated from the CLI's help by packaging/gen_man.py
set -eu

if [ $# -lt 1 ] || [ $# -gt 3 ]; then
    echo "usage: packaging/stage.sh DESTDIR [PYTHON [WHEELHOUSE]]" >&2
    exit 2
fi
destdir=$1
python=${2:-/usr/bin/python3}
wheelhouse=${3:-packaging/build/wheelhouse}
build_python=${BUILD_PYTHON:-/usr/bin/python3}
unitdir=${SYSTEMD_UNITDIR:-/usr/lib/systemd/system}
private=/usr/share/nvct/lib
lib=$destdir$private
grpc_dir=/usr/lib/nvct/grpc

fail() {
    echo "stage.sh: $*" >&2
    exit 1
}

[ -f pyproject.toml ] && [ -d nvct ] || fail "run from the source tree's root (pyproject.toml, nvct/)"
case $python in /*) ;; *) fail "PYTHON must be an absolute path, got '$python'" ;; esac
case $unitdir in /*) ;; *) fail "SYSTEMD_UNITDIR must be an absolute path, got '$unitdir'" ;; esac
[ -f nvct/runtime/launch/launcher.c ] || fail "nvct/runtime/launch/launcher.c is missing (it becomes /usr/bin/nvct-runtime)"
[ -f config/config.toml ] || fail "config/config.toml is missing (it becomes /etc/nvct/config.toml)"
set -- hooks/*.json
[ -f "$1" ] || fail "hooks/ holds no *.json OCI hook (it becomes /usr/share/containers/oci/hooks.d/)"
ls "$wheelhouse"/*.whl >/dev/null 2>&1 ||
    fail "no wheels in $wheelhouse: run 'make -C packaging wheelhouse' (downloads packaging/vendor.txt from PyPI)"
pyver=${NVCT_PYTHON_VERSION:-}
if [ -z "$pyver" ] && [ -x "$python" ]; then
    pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || pyver=
fi
if [ -z "$pyver" ]; then
    case ${python##*/} in
    python[0-9].[0-9]*) pyver=${python##*/python} ;;
    esac
fi
case $pyver in
[0-9].[0-9] | [0-9].[0-9][0-9]) ;;
*) fail "cannot tell the version of $python (not runnable here): set NVCT_PYTHON_VERSION=X.Y" ;;
esac
abi=cp$(echo "$pyver" | tr -d .)
grpc_platform=${GRPC_PLATFORM:-manylinux2014_$(uname -m)}
set -- "$wheelhouse"/grpc/grpcio-*-"$abi"-"$abi"-*.whl
[ -f "$1" ] ||
    fail "no grpcio wheel for Python $pyver ($abi) in $wheelhouse/grpc: run 'make -C packaging wheelhouse RPM_PYTHON=$python RPM_PYTHON_VERSION=$pyver' (packaging/vendor-grpc.txt)"

umask 022
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# 1. nvct's own wheel (flit_core, no isolation: offline), then everything into the private tree.
"$build_python" -B -c 'import sys
from flit_core.buildapi import build_wheel
build_wheel(sys.argv[1])' "$work" >/dev/null
rm -rf "$lib"
mkdir -p "$lib"
# --isolated: no pip.conf or PIP_* from the build machine; --no-compile: no .pyc for the build
# host's Python in the package (postinst / %post compile for the target's).
"$build_python" -m pip --isolated install --quiet --no-index --no-deps --no-compile \
    --disable-pip-version-check --root-user-action=ignore --target "$lib" \
    "$work"/nvct-*.whl "$wheelhouse"/*.whl
# pip --target writes console scripts (ours and pyelftools') to bin/: the launchers are ours.
# nvidia-ml-py installs a top-level example.py; pip's INSTALLER, REQUESTED and direct_url.json
# describe this build (its paths), not the package.
rm -rf "$lib/bin" "$lib/example.py"
rm -f "$lib"/*.dist-info/direct_url.json "$lib"/*.dist-info/INSTALLER "$lib"/*.dist-info/REQUESTED
# PyYAML (packaging/vendor-sdist.txt): only its pure-Python package, out of the pinned sdist.
set -- "$wheelhouse"/pyyaml-*.tar.gz
[ -f "$1" ] || fail "no pyyaml sdist in $wheelhouse: run 'make -C packaging wheelhouse'"
tar -xzf "$1" -C "$work" --wildcards '*/lib/yaml/*.py' '*/LICENSE'
mkdir -p "$lib/yaml"
cp "$work"/pyyaml-*/lib/yaml/*.py "$lib/yaml/"
cp "$work"/pyyaml-*/LICENSE "$lib/yaml/LICENSE"
# grpcio, protobuf and typing_extensions for the target's CPython and architecture (not the
# build host's: --python-version/--abi/--platform), hash-checked again, into a directory of
# their own that only the launchers needing gRPC append to sys.path.
rm -rf "$destdir$grpc_dir"
"$build_python" -m pip --isolated install --quiet --no-index --find-links "$wheelhouse/grpc" \
    --no-deps --no-compile --require-hashes --only-binary=:all: --implementation cp \
    --python-version "$pyver" --abi "$abi" --platform "$grpc_platform" \
    --disable-pip-version-check --root-user-action=ignore --target "$destdir$grpc_dir" \
    -r packaging/vendor-grpc.txt ||
    fail "cannot install packaging/vendor-grpc.txt for Python $pyver ($grpc_platform) from $wheelhouse/grpc"
rm -rf "$destdir$grpc_dir/bin"
rm -f "$destdir$grpc_dir"/*.dist-info/direct_url.json "$destdir$grpc_dir"/*.dist-info/INSTALLER \
    "$destdir$grpc_dir"/*.dist-info/REQUESTED

# 2. Launchers. -I: ignore PYTHON* variables, the user site and the working directory (a
# container's environment must never inject code into a root process); -S: not even the
# system site-packages, so only the standard library and the private tree are importable.
# With a third argument, grpc: the launcher appends the grpc directory, after the standard
# library and the private tree, so that no other import looks there; grpc-required: and exits
# with one line (the Python grpcio was built for, and the fix) when grpc cannot be imported.
launcher() { # path module [grpc|grpc-required]
    mkdir -p "$(dirname "$destdir$1")"
    {
        cat <<EOF
#!$python -IS
# ${1##*/}: nvct launcher. Runs nvct from its private tree with the system Python, isolated
# (-I -S) from PYTHON* variables, the user and system site-packages and the working directory.
import sys

sys.path.insert(0, "$private")
EOF
        case ${3:-} in
        grpc | grpc-required)
            echo "# grpcio and protobuf, compiled for Python $pyver (imported only when gRPC is used)"
            echo "sys.path.append(\"$grpc_dir\")"
            ;;
        esac
        if [ "${3:-}" = grpc-required ]; then
            echo "from nvct.kubeapi.grpc_deps import require_grpc"
            echo
            echo "require_grpc(\"${1##*/}\")"
        fi
        cat <<EOF
from $2 import main

sys.exit(main())
EOF
    } >"$destdir$1"
    chmod 0755 "$destdir$1"
}
# the Python hook: what the native /usr/bin/nvct-hook (below) runs when no shim daemon answers
launcher /usr/libexec/nvct/nvct-hook nvct.hook.__main__
launcher /usr/bin/nvct-cli nvct.cli.main grpc
launcher /usr/bin/nvct-device-plugin nvct.deviceplugin.__main__ grpc-required
# the Kubernetes API client's msgspec is compiled per CPython too: it sits in the grpc directory
launcher /usr/bin/nvct-config-manager nvct.configmanager.__main__ grpc
# DRA's kubelet plugin: gRPC to the kubelet, lightkube (msgspec) to the API server
launcher /usr/bin/nvct-dra-plugin nvct.dra.__main__ grpc-required
# the Python CDI hook: what the native /usr/bin/nvct-cdi-hook (below) hands what it does not take
launcher /usr/libexec/nvct/nvct-cdi-hook nvct.hook.cdi
ln -sf nvct-hook "$destdir/usr/bin/nvidia-container-runtime-hook"
launcher /usr/libexec/nvct/nvct-runtime nvct.runtime.__main__
launcher /usr/libexec/nvct/nvct-runtime-daemon nvct.runtime.launch.daemon
# containerd calls the runtime several times per container: the native launcher execs runc
# directly for all but a GPU container's create, which it hands to the shim daemon (or, when
# none answers, to the Python shim in libexec). It is built by the private tree's own nvct
# from the private tree's launcher.c, so the code id compiled into it is the installed tree's
# and the installed daemon accepts it. Nothing below may change a .py file in "$lib".
"$build_python" -ISB -c 'import sys
sys.path.insert(0, sys.argv[1])
from nvct.runtime.launch.build import main
sys.exit(main(sys.argv[2:]))' "$lib" --native --output "$destdir/usr/bin/nvct-runtime" \
    --python-command /usr/libexec/nvct/nvct-runtime ||
    fail "cannot build the native launcher (needs a C compiler: \$CC, default cc)"
# nvct-hook (and nvidia-container-runtime-hook, docker --gpus's name): the native prestart hook,
# which hands the OCI state to the same daemon (no interpreter per container), and runs the
# Python hook in libexec when none answers.
"$build_python" -ISB -c 'import sys
sys.path.insert(0, sys.argv[1])
from nvct.runtime.launch.build import main
sys.exit(main(sys.argv[2:]))' "$lib" --native --hook --output "$destdir/usr/bin/nvct-hook" \
    --python-command /usr/libexec/nvct/nvct-hook ||
    fail "cannot build the native hook (needs a C compiler: \$CC, default cc)"
# nvct-cdi-hook: the createContainer hook CDI specs name (nvct-cli cdi generate), a program
# rather than "python -m nvct.hook.cdi" so that the spec works whichever tree nvct is imported
# from; native (the links, ld.so.conf.d and the merged ld.so.cache without an interpreter), the
# Python hook in libexec for the rest.
"$build_python" -ISB -c 'import sys
sys.path.insert(0, sys.argv[1])
from nvct.runtime.launch.build import main
sys.exit(main(sys.argv[2:]))' "$lib" --native --cdi-hook --output "$destdir/usr/bin/nvct-cdi-hook" \
    --python-command /usr/libexec/nvct/nvct-cdi-hook ||
    fail "cannot build the native CDI hook (needs a C compiler: \$CC, default cc)"
install -D -m 0644 packaging/nvct-runtime-daemon.service \
    "$destdir$unitdir/nvct-runtime-daemon.service"
# CDI refresh: the spec is regenerated at boot and when the driver changes (see the units).
install -m 0644 packaging/nvct-cdi-refresh.service packaging/nvct-cdi-refresh.path \
    "$destdir$unitdir/"
# The device plugin's unit: shipped, never enabled by the packages (a node without a kubelet
# does not want it).
install -m 0644 packaging/nvct-device-plugin.service packaging/nvct-mps-control.service \
    "$destdir$unitdir/"

# 3. Configuration and the OCI hook for podman / CRI-O.
install -D -m 0644 config/config.toml "$destdir/etc/nvct/config.toml"
mkdir -p "$destdir/usr/share/containers/oci/hooks.d"
install -m 0644 hooks/*.json "$destdir/usr/share/containers/oci/hooks.d/"

# 4. Man pages from the CLI's own help text (compressed here, identically for both formats).
"$build_python" -ISB packaging/gen_man.py --lib "$lib" --config config/config.toml \
    --out "$destdir/usr/share/man"
gzip -9nf "$destdir"/usr/share/man/man?/*.[0-9]
ln -sf nvct-hook.1.gz "$destdir/usr/share/man/man1/nvidia-container-runtime-hook.1.gz"

# 5. No byte code from the build host (the package scripts compile for the target's Python).
find "$lib" "$destdir$grpc_dir" -name __pycache__ -prune -exec rm -rf {} +
find "$lib" "$destdir$grpc_dir" -type d -exec chmod 0755 {} +
find "$lib" "$destdir$grpc_dir" -type f -exec chmod 0644 {} +
