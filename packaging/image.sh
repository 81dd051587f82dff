#!/bin/sh
# nvct's OCI image, built without a registry: a Debian 12 minbase rootfs (debootstrap, from
# Debian's mirror) with python3 and nvct's .deb installed, deployments/node-install.sh as
# /usr/share/nvct/node-install.sh (the installer DaemonSet's entry point) and
# deployments/nvct-system-runtime as /usr/bin/nvct-system-runtime (RuntimeClass nvct-system),
# /usr/bin/nvidia-device-plugin -> nvct-device-plugin (the GPU operator's name). The .deb brings
# everything the DaemonSets run: nvct-device-plugin and nvct-cli with the grpcio (for Debian
# 12's python3, the .deb's target) and protobuf of /usr/lib/nvct/grpc.
#
#   packaging/image.sh OUTPUT.tar [DEB]     (as root; DEB default: packaging/build/nvct_*.deb)
#
# OUTPUT.tar is the rootfs as a tarball: `docker import OUTPUT.tar nvct:VERSION` (make image does
# it when a dockerd answers) or `ctr images import`-able after conversion. The debootstrap'd base
# is cached in packaging/build/image-base.tar, so rebuilding after a code change takes seconds.
set -eu

out=${1:?usage: packaging/image.sh OUTPUT.tar [DEB]}
deb=${2:-$(ls packaging/build/nvct_*_"$(dpkg --print-architecture)".deb 2>/dev/null | head -n 1)}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base=packaging/build/image-base.tar

fail() {
    echo "packaging/image.sh: $*" >&2
    exit 1
}
[ "$(id -u)" -eq 0 ] || fail "must run as root (debootstrap, chroot)"
[ -n "$deb" ] && [ -f "$deb" ] || fail "no nvct .deb (fix: make -C packaging deb)"
command -v debootstrap >/dev/null || fail "debootstrap is missing (fix: apt-get install debootstrap)"

root=$(mktemp -d /tmp/nvct-image.XXXXXX)
trap 'rm -rf "$root"' EXIT
if [ ! -f "$base" ]; then
    debootstrap --variant=minbase --include=python3 bookworm "$root" "$mirror" >&2
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -cf "$base.tmp" . && mv "$base.tmp" "$base"
else
    tar -C "$root" -xf "$base"
fi
cp "$deb" "$root/tmp/nvct.deb"
# No service may start inside the build (the .deb's postinst asks systemd, absent here).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 755 "$root/usr/sbin/policy-rc.d"
chroot "$root" dpkg -i /tmp/nvct.deb >&2
rm -f "$root/tmp/nvct.deb" "$root/usr/sbin/policy-rc.d"
install -m 0755 deployments/node-install.sh "$root/usr/share/nvct/node-install.sh"
# the runtime of the RuntimeClass nvct-system, which node-install.sh copies to the nodes
install -m 0755 deployments/nvct-system-runtime "$root/usr/bin/nvct-system-runtime"
# NVIDIA's program name: the GPU operator's device-plugin entrypoint ends in
# `exec nvidia-device-plugin`. In the image only: a host's packages keep nvct's names.
ln -s nvct-device-plugin "$root/usr/bin/nvidia-device-plugin"
tar -C "$root" --numeric-owner -cf "$out" .
echo "$out"
