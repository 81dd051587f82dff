#!/bin/sh
# nvct's node installer, run by the nvct-installer DaemonSet (deployments/installer.yaml) from
# the nvct image, with the node's root filesystem at $HOST (default /host).
#
#   node-install.sh install    copy nvct onto the node, register nvct-runtime with the engine
#                              ($ENGINE: containerd or crio) as runtime "nvidia", restart it
#   node-install.sh uninstall  undo exactly that: the engine's config as it was, nvct's files
#                              gone (files that were on the node before are never touched)
#   node-install.sh run        install, then wait; uninstall on SIGTERM (pod deletion)
#
# nvct goes where its packages put it (/usr/bin, /usr/libexec/nvct, /usr/share/nvct), so the
# paths compiled into the native launcher hold on the node; the node needs /usr/bin/python3.
# What was copied is listed in $HOST/var/lib/nvct/node-install.list, the uninstall's guide.
set -eu

HOST=${HOST:-/host}
SRC=${SRC:-/}
ENGINE=${ENGINE:-containerd}
NVCT_CLI=${NVCT_CLI:-/usr/bin/nvct-cli}
# The engine restart, run in the node's namespaces (the pod has hostPID).
RESTART=${RESTART:-nsenter -t 1 -m -u -i -n -p -- systemctl restart $ENGINE}
LIST=$HOST/var/lib/nvct/node-install.list
# nvct-cdi-hook: the createContainer hook of the CDI spec the device plugin writes, which the
# engine runs on the node; /usr/lib/nvct: the gRPC nvct-cli's Kubernetes checks talk with.
PATHS="usr/bin/nvct-cli usr/bin/nvct-hook usr/bin/nvct-runtime usr/bin/nvidia-container-runtime-hook
usr/bin/nvct-cdi-hook usr/libexec/nvct usr/share/nvct usr/lib/nvct etc/nvct/config.toml"

case $ENGINE in
    containerd) engine_config=$HOST/etc/containerd/config.toml ;;
    crio) engine_config=$HOST/etc/crio/crio.conf.d/99-nvct.toml ;;
    *)
        echo "node-install.sh: ENGINE=$ENGINE: use containerd or crio" >&2
        exit 2
        ;;
esac

log() { echo "node-install.sh: $*"; }

install_files() {
    mkdir -p "$(dirname "$LIST")"
    : >"$LIST.new"
    for rel in $PATHS; do
        [ -e "$SRC/$rel" ] || continue
        # Every file and directory under it, each copied only where the node has none.
        (cd "$SRC" && find "$rel" \( -type f -o -type l -o -type d \) -print) |
            while IFS= read -r item; do
                if [ -e "$HOST/$item" ] || [ -L "$HOST/$item" ]; then
                    continue
                fi
                if [ -d "$SRC/$item" ] && [ ! -L "$SRC/$item" ]; then
                    mkdir -p "$HOST/$item"
                else
                    mkdir -p "$(dirname "$HOST/$item")"
                    cp -a "$SRC/$item" "$HOST/$item"
                fi
                echo "$item" >>"$LIST.new"
            done
    done
    [ -f "$LIST" ] && cat "$LIST" >>"$LIST.new"
    sort -u "$LIST.new" >"$LIST"
    rm -f "$LIST.new"
}

remove_files() {
    [ -f "$LIST" ] || return 0
    # Deepest first: files, then the directories this installer made (if left empty).
    sort -r "$LIST" | while IFS= read -r item; do
        if [ -d "$HOST/$item" ] && [ ! -L "$HOST/$item" ]; then
            rmdir "$HOST/$item" 2>/dev/null || true
        else
            rm -f "$HOST/$item"
        fi
    done
    rm -f "$LIST"
}

configure() {
    "$NVCT_CLI" configure --runtime "$ENGINE" --config "$engine_config" \
        --runtime-path /usr/bin/nvct-runtime "$@"
}

install() {
    install_files
    configure
    log "nvct installed on the node; restarting $ENGINE"
    $RESTART
}

uninstall() {
    configure --undo
    remove_files
    log "nvct removed from the node; restarting $ENGINE"
    $RESTART
}

case ${1:-run} in
    install) install ;;
    uninstall) uninstall ;;
    run)
        install
        trap 'uninstall; exit 0' TERM INT
        while :; do sleep 3600 & wait $!; done
        ;;
    *)
        echo "usage: node-install.sh install|uninstall|run" >&2
        exit 2
        ;;
esac
