#!/usr/bin/env bash
# Build a Debian base image for Osprey lanes without any container registry:
# debootstrap a minimal root filesystem from the Debian mirror, then `docker import` it.
#
#   images/build-base.sh TAG [SUITE] [MIRROR]
#
# The image already holds what the lane needs (bash, coreutils, findutils, git, ripgrep,
# python3, tini), so building the lane on it needs no network at all. Needs root and debootstrap.
set -euo pipefail
tag=${1:?usage: build-base.sh TAG [SUITE] [MIRROR]}
suite=${2:-bookworm}
mirror=${3:-http://deb.debian.org/debian}
packages=bash,coreutils,findutils,git,ripgrep,python3,tini,ca-certificates,procps

if [ "$(id -u)" -ne 0 ]; then
    echo "build-base.sh: debootstrap needs root; run it with sudo" >&2
    exit 1
fi
command -v debootstrap >/dev/null || { echo "build-base.sh: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "debootstrap $suite from $mirror ..."
debootstrap --variant=minbase --include="$packages" "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -n 30 "$work/debootstrap.log" >&2
    exit 1
}
# Package caches and lists only make the image bigger.
rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"* "$work/rootfs/usr/share/doc/"* "$work/rootfs/usr/share/man/"*
echo "docker import as $tag ..."
tar -C "$work/rootfs" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$tag"
echo "built $tag"
