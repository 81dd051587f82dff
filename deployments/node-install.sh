#!/bin/sh
# nvct's node installer, run by the nvct-installer DaemonSet (deployments/installer.yaml) from
# the nvct image, with the node's root filesystem at $HOST (default /host).
#
#   node-install.sh install    copy nvct onto the node, register nvct-runtime with the engine
#                              ($ENGINE: containerd or crio) as runtime "nvidia", and
#                              nvct-system-runtime as "nvct-system" (nvct's own DaemonSets),
#                              restart it
#   node-install.sh uninstall  undo exactly that: the engine's config as it was, nvct's files
#                              gone (files that were on the node before are never touched)
#   node-install.sh run        install (once the node has a GPU), then wait; uninstall on
#                              SIGTERM (pod deletion)
#
# Once nvct's handlers are registered (and the engine restarted), the node's Node object gets
# the label $NODE_LABEL=true (nvct.io/runtime.ready), which nvct's DaemonSets on those handlers
# require: they never start on a node without them. uninstall, and install on a node without
# a GPU, remove it. Through `nvct-cli node-label` with the pod's token ($NVCT_SERVICE_ACCOUNT_DIR),
# which may change only that label of its own Node ($NODE_NAME). Without a token (the chart's
# installer.labelNodes=false, or run outside a pod) it says so once and goes on.
#
# nvct goes where its packages put it (/usr/bin, /usr/libexec/nvct, /usr/share/nvct), so the
# paths compiled into the native launcher hold on the node; the node needs /usr/bin/python3.
# What was copied is listed in $HOST/var/lib/nvct/node-install.list, the uninstall's guide.
#
# Safe on a live node:
# - a node without an NVIDIA GPU ($DEV_ROOT/dev/nvidia<N>, DEV_ROOT default $HOST) is left
#   alone: nothing copied, the engine neither configured nor restarted;
# - the engine is restarted only when its config changed (running containers survive a
#   restart; a needless one still costs the node its CRI for a moment);
# - a newer image replaces the files an earlier run installed, each by rename, so a runtime
#   binary a container's shim is running keeps its old inode;
# - uninstall keeps /usr/bin/nvct-runtime while a containerd task still runs with it (its shim
#   calls the runtime to stop and delete the container): a later uninstall removes it.
set -eu

HOST=${HOST:-/host}
DEV_ROOT=${DEV_ROOT:-$HOST}
SRC=${SRC:-/}
ENGINE=${ENGINE:-containerd}
NVCT_CLI=${NVCT_CLI:-/usr/bin/nvct-cli}
GPU_POLL=${GPU_POLL:-30}  # seconds between two looks for a GPU (run, on a node without one)
NODE_LABEL=${NODE_LABEL-nvct.io/runtime.ready}  # "": no label
NODE_NAME=${NODE_NAME:-}
NVCT_SERVICE_ACCOUNT_DIR=${NVCT_SERVICE_ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
export NVCT_SERVICE_ACCOUNT_DIR
# seconds before the first retry of a refused or failed label (run), doubling up to 600
LABEL_RETRY=${LABEL_RETRY:-5}
# The engine restart, run in the node's namespaces (the pod has hostPID).
RESTART=${RESTART:-nsenter -t 1 -m -u -i -n -p -- systemctl restart $ENGINE}
LIST=$HOST/var/lib/nvct/node-install.list
RUNTIME=usr/bin/nvct-runtime
# nvct-cdi-hook: the createContainer hook of the CDI spec the device plugin writes, which the
# engine runs on the node; /usr/lib/nvct: the gRPC nvct-cli's Kubernetes checks talk with.
PATHS="usr/bin/nvct-cli usr/bin/nvct-hook usr/bin/nvct-runtime usr/bin/nvidia-container-runtime-hook
usr/bin/nvct-cdi-hook usr/libexec/nvct usr/share/nvct usr/lib/nvct etc/nvct/config.toml
usr/bin/nvct-system-runtime etc/nvct/system.toml"
# The RuntimeClass nvct-system's runtime: nvct-runtime with etc/nvct/system.toml.
SYSTEM_RUNTIME=nvct-system
SYSTEM_RUNTIME_PATH=usr/bin/nvct-system-runtime

case $ENGINE in
    containerd) engine_config=$HOST/etc/containerd/config.toml ;;
    crio) engine_config=$HOST/etc/crio/crio.conf.d/99-nvct.toml ;;
    *)
        echo "node-install.sh: ENGINE=$ENGINE: use containerd or crio" >&2
        exit 2
        ;;
esac

log() { echo "node-install.sh: $*"; }

has_gpu() {
    for node in "$DEV_ROOT"/dev/nvidia[0-9]*; do
        [ -e "$node" ] && return 0
    done
    return 1
}

# containerd's state directory on the node (its config's `state`, default /run/containerd).
containerd_state() {
    state=$(sed -n 's/^state *= *"\(.*\)".*/\1/p' "$engine_config" 2>/dev/null | head -n 1)
    echo "$HOST${state:-/run/containerd}"
}

# Whether a containerd task still runs with the runtime $1 (its shim's options.json names it).
runtime_in_use() {
    [ "$ENGINE" = containerd ] || return 1
    for options in "$(containerd_state)"/io.containerd.runtime.v2.task/*/*/options.json; do
        [ -f "$options" ] && grep -q "\"/$1\"" "$options" && return 0
    done
    return 1
}

# Whether the Node can be labelled from here; says why not, once.
api_said=
api_access() {
    [ -n "$NODE_LABEL" ] || return 1
    if [ -n "$NODE_NAME" ] && [ -f "$NVCT_SERVICE_ACCOUNT_DIR/token" ]; then return 0; fi
    if [ -z "$api_said" ]; then
        log "no Kubernetes API access (NODE_NAME or $NVCT_SERVICE_ACCOUNT_DIR/token missing): the node is not labelled $NODE_LABEL (DaemonSets that require it do not start here)"
        api_said=1
    fi
    return 1
}

# mark set|remove: the Node's label $NODE_LABEL=true set or removed (nothing without API access).
mark() {
    api_access || return 0
    if [ "$1" = set ]; then change="$NODE_LABEL=true"; else change="$NODE_LABEL-"; fi
    "$NVCT_CLI" node-label --node "$NODE_NAME" "$change"
}

config_sum() {
    if [ -f "$engine_config" ]; then cksum <"$engine_config"; else echo none; fi
}

install_files() {
    mkdir -p "$(dirname "$LIST")"
    touch "$LIST"
    : >"$LIST.new"
    for rel in $PATHS; do
        [ -e "$SRC/$rel" ] || continue
        # Every file and directory under it: copied where the node has none, replaced where an
        # earlier run put it (listed), never over a file of the node's own.
        (cd "$SRC" && find "$rel" \( -type f -o -type l -o -type d \) -print) |
            while IFS= read -r item; do
                ours=false
                if grep -qxF "$item" "$LIST"; then ours=true; fi
                if [ -d "$SRC/$item" ] && [ ! -L "$SRC/$item" ]; then
                    if [ ! -e "$HOST/$item" ]; then
                        mkdir -p "$HOST/$item"
                        ours=true
                    fi
                elif [ $ours = true ] || { [ ! -e "$HOST/$item" ] && [ ! -L "$HOST/$item" ]; }; then
                    mkdir -p "$(dirname "$HOST/$item")"
                    cp -a "$SRC/$item" "$HOST/$item.nvct-new"
                    mv -f "$HOST/$item.nvct-new" "$HOST/$item"
                    ours=true
                fi
                if [ $ours = true ]; then echo "$item" >>"$LIST.new"; fi
            done
    done
    cat "$LIST" >>"$LIST.new"
    sort -u "$LIST.new" >"$LIST"
    rm -f "$LIST.new"
}

remove_files() {
    [ -f "$LIST" ] || return 0
    kept=
    # nvct-system-runtime runs nvct-runtime: both stay while a container runs with it.
    if runtime_in_use "$SYSTEM_RUNTIME_PATH"; then
        kept="$SYSTEM_RUNTIME_PATH
$RUNTIME"
    elif runtime_in_use "$RUNTIME"; then
        kept=$RUNTIME
    fi
    for item in $kept; do
        log "kept /$item: containers still run with it (uninstall again once they are gone)"
    done
    # Deepest first: files, then the directories this installer made (if left empty).
    sort -r "$LIST" | while IFS= read -r item; do
        if printf '%s\n' "$kept" | grep -qxF "$item"; then
            continue
        elif [ -d "$HOST/$item" ] && [ ! -L "$HOST/$item" ]; then
            rmdir "$HOST/$item" 2>/dev/null || true
        else
            rm -f "$HOST/$item"
        fi
    done
    if [ -n "$kept" ]; then
        printf '%s\n' "$kept" >"$LIST"
    else
        rm -f "$LIST"
    fi
}

configure() {
    "$NVCT_CLI" configure --runtime "$ENGINE" --config "$engine_config" \
        --runtime-path /usr/bin/nvct-runtime "$@"
    "$NVCT_CLI" configure --runtime "$ENGINE" --config "$engine_config" \
        --runtime-name "$SYSTEM_RUNTIME" --runtime-path "/$SYSTEM_RUNTIME_PATH" "$@"
}

restart_if_changed() {
    if [ "$1" = "$(config_sum)" ]; then
        log "$ENGINE's config unchanged: $ENGINE not restarted"
    else
        log "restarting $ENGINE"
        $RESTART
    fi
}

install() {
    if ! has_gpu; then
        log "no NVIDIA GPU on this node ($DEV_ROOT/dev/nvidia*): nothing installed, $ENGINE left alone"
        # a label an earlier install left (the GPU is gone)
        mark remove || log "the label $NODE_LABEL could not be removed"
        return 0
    fi
    before=$(config_sum)
    install_files
    configure
    log "nvct installed on the node"
    restart_if_changed "$before"
}

uninstall() {
    # first: the pods on nvct's handlers leave before the handlers go
    mark remove || log "the label $NODE_LABEL could not be removed: remove it by hand (kubectl label node $NODE_NAME $NODE_LABEL-)"
    before=$(config_sum)
    if [ -f "$LIST" ]; then configure --undo; fi
    remove_files
    log "nvct removed from the node"
    restart_if_changed "$before"
}

case ${1:-run} in
    install)
        install
        if has_gpu; then mark set; fi
        ;;
    uninstall) uninstall ;;
    run)
        # the pending sleep ends with the script: none outlives it
        sleeper=
        nap() {
            sleep "$1" &
            sleeper=$!
            wait "$sleeper"
        }
        trap 'kill "$sleeper" 2>/dev/null || true; uninstall; exit 0' TERM INT
        # A node whose GPUs are not there yet (a driver container still loading) gets nvct
        # once they are; a node that never has one is never touched.
        if ! has_gpu; then
            log "no NVIDIA GPU on this node ($DEV_ROOT/dev/nvidia*): waiting for one, $ENGINE left alone"
            # a label an earlier install left (the GPU is gone)
            mark remove || log "the label $NODE_LABEL could not be removed"
            until has_gpu; do nap "$GPU_POLL"; done
        fi
        install
        # the engine runs nvct's handlers now: the label lets the pods on them come (tried
        # again, the pause doubling, while the API server is away or refuses)
        pause=$LABEL_RETRY
        until mark set; do
            log "labelling the node failed: trying again in ${pause}s"
            nap "$pause"
            pause=$((pause * 2 > 600 ? 600 : pause * 2))
        done
        while :; do nap 3600; done
        ;;
    *)
        echo "usage: node-install.sh install|uninstall|run" >&2
        exit 2
        ;;
esac
