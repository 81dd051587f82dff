#!/bin/bash
# The one command for a lent GPU machine (root, no docker, no package archive, no network):
# nvct from carried wheels, docker and runc from a carried kit, then what only a real GPU
# answers: bench/device_check.py (nvct on the real driver: info, list, doctor, labels, CDI, the
# device plugin, MPS, the exporter, a container) and bench.gpus_goal's verdicts on it.
#
#   bash bench/gpu_machine.sh OUT [BUDGET_S]
#
# from the repository root, with .whl/ (cp312 wheels of nvct's dependencies), and .devcarry/
# holding kit.tar.xz (python -m bench.docker_kit .devcarry/kit.tar.xz) and a static busybox.
# BUDGET_S (default 240) bounds the benches' rounds, so the whole run fits a lent machine's
# time. STEPS (default "check goal") picks among check (device_check), goal (gpus_goal),
# floor (bench.mount_floor: the real driver's mounts and nodes handed to docker itself) and
# copies (bench.runc_only --compare-copies: 1 GPU with one mount per library against
# inject.library-mounts = "directory-copies", bare runc, 200 rounds, about a minute) and
# binaries (bench.runc_only --compare-binaries: inject.binaries "links" against "mounts",
# through nvct-runtime and the --gpus hook, bare runc, 150 rounds; with LIBRARY_MOUNTS).
# Everything lands in OUT: gpu-machine.log, check/device-check.{txt,json}, results-goal.json,
# results-floor.json, results-libcopies.json, results-binaries.json. A step that fails is logged and the next one runs.
set -u
OUT=${1:?usage: bash bench/gpu_machine.sh OUT [BUDGET_S]}
BUDGET=${2:-240}
CARRY=${CARRY:-.devcarry}
WHEELS=${WHEELS:-.whl}
DRIVER=${DRIVER:-host} # sim: the simulated driver, for a dry run on a machine without a GPU
STEPS=" ${STEPS:-check goal} "
# LIBRARY_MOUNTS: nvct's inject.library-mounts for the benches (directory-copies where the
# driver is on another filesystem than the cache dir, as on the lent machines)
MOUNTS=${LIBRARY_MOUNTS:+--library-mounts $LIBRARY_MOUNTS}
ROOT=$PWD
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-machine.log") 2>&1
step() { echo "=== $(date +%T) +${SECONDS}s $*"; }

step "nvct into /tmp/v from the carried wheels"
PY=$(command -v python3)
# device_check's MPS step runs its CUDA client on the interpreter that has torch
"$PY" -c "import torch" 2>/dev/null && export TORCH_PYTHON=$PY
"$PY" -V
"$PY" -m venv --without-pip /tmp/v || exit 1
SP=$(/tmp/v/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -m pip install -q --no-deps --no-compile --target "$SP" "$WHEELS"/*.whl || exit 1
echo "$ROOT" >"$SP/nvct.pth"
/tmp/v/bin/python - <<'EOF' || exit 1
import os, tomllib
for name, target in tomllib.load(open("pyproject.toml", "rb"))["project"]["scripts"].items():
    mod, fn = target.split(":")
    path = f"/tmp/v/bin/{name}"
    with open(path, "w") as f:
        f.write(f"#!/tmp/v/bin/python\nimport sys\nfrom {mod} import {fn}\n"
                f"sys.argv[0] = {name!r}\nsys.exit({fn}())\n")
    os.chmod(path, 0o755)
EOF

step "docker and runc from the kit; the libraries they link that this host lacks"
mkdir -p /tmp/kit && tar xJf "$CARRY/kit.tar.xz" -C /tmp/kit || exit 1
mkdir -p /usr/local/lib/nvct-kit
for lib in /tmp/kit/lib/*; do
    name=$(basename "$lib")
    if ! ldconfig -p | grep -q "^[[:space:]]*$name "; then
        cp "$lib" /usr/local/lib/nvct-kit/ && echo "from the kit: $name"
    fi
done
echo /usr/local/lib/nvct-kit >/etc/ld.so.conf.d/nvct-kit.conf && ldconfig
[ -e /bin/busybox ] || cp "$CARRY/busybox" /bin/busybox
export PATH=/tmp/v/bin:/tmp/kit/bin:$PATH
for p in dockerd containerd runc; do "$p" --version 2>&1 | head -1; done

step "nvct's native launcher and hook"
/tmp/v/bin/python -m nvct.runtime.launch.build --native --output /tmp/v/bin/nvct-runtime || exit 1
/tmp/v/bin/python -m nvct.runtime.launch.build --native --hook \
    --output /tmp/v/bin/nvidia-container-runtime-hook || exit 1
nvidia-smi -L

if [ "$DRIVER" = host ] && [[ $STEPS == *" check "* ]]; then
    step "device_check"
    timeout 240 /tmp/v/bin/python bench/device_check.py --out "$OUT/check" \
        --busybox /bin/busybox >/dev/null || echo "device_check: exit $?"
    grep -E '^----- ' "$OUT/check/device-check.txt"
fi

if [[ $STEPS == *" floor "* ]]; then
    step "mount_floor, budget ${BUDGET} s"
    timeout $((BUDGET + 180)) /tmp/v/bin/python -m bench.mount_floor --driver "$DRIVER" \
        --rounds 2000 --budget-s "$BUDGET" --output "$OUT/results-floor.json" $MOUNTS
fi

if [[ $STEPS == *" copies "* ]]; then
    step "runc_only --compare-copies"
    timeout 300 /tmp/v/bin/python -m bench.runc_only --driver "$DRIVER" --compare-copies \
        --rounds 200 --output "$OUT/results-libcopies.json" | tail -12
fi

if [[ $STEPS == *" binaries "* ]]; then
    step "runc_only --compare-binaries"
    timeout 300 /tmp/v/bin/python -m bench.runc_only --driver "$DRIVER" --compare-binaries \
        --rounds 150 --output "$OUT/results-binaries.json" $MOUNTS | tail -12
fi

[[ $STEPS == *" goal "* ]] || { step done; exit 0; }
step "gpus_goal, budget ${BUDGET} s"
goal() {
    timeout $((BUDGET + 180)) /tmp/v/bin/python -m bench.gpus_goal --install-path venv \
        --goals-only --driver "$DRIVER" --rounds 2000 --output "$OUT/results-goal.json" $MOUNTS "$@"
}
began=$SECONDS
if ! goal --budget-s "$BUDGET" --storage-driver overlay2 && [ $((SECONDS - began)) -lt 90 ]; then
    step "overlay2 failed before its rounds: vfs"
    goal --budget-s $((BUDGET - (SECONDS - began))) --storage-driver vfs
fi
step done
