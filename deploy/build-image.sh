#!/bin/bash
# deploy/build-image.sh [TAG] - build the relay's container image
# (deploy/Dockerfile) with podman from Debian 12, on a machine where no
# container registry is reachable. Idempotent; run as root from anywhere.
#
#   1. installs podman + runc (and what they need) when podman is missing;
#   2. writes /etc/containers/containers.conf (default_ulimits = [], podman's
#      defaults are refused on some hosts) only if it does not exist;
#   3. builds the base image once: debootstrap --variant=minbase bookworm into
#      $BASE_ROOTFS (default /var/tmp/bookworm-rootfs) from the Debian mirror
#      in the host's apt sources, imported as localhost/debian:12 and tagged
#      as the names deploy/Dockerfile's FROM lines resolve to; reused later
#      (a marker file in the rootfs, and the image itself);
#   4. builds TAG (default outbox-relay:test) with runc (crun refuses on
#      cgroups v1 hybrid hosts), --format docker (keeps HEALTHCHECK);
#   5. prints the image size.
#
# Environment: BASE_ROOTFS, PODMAN_RUNTIME (default runc), BUILD_LOG (podman
# build's output, default /var/tmp/outbox-image-build.log; its tail is
# printed when the build fails).
# Exit codes: 0 built, 1 build failed, 3 podman cannot be installed or run
# containers here, or no base image (no Debian mirror, debootstrap failed).
set -euo pipefail

TAG=${1:-outbox-relay:test}
ROOTFS=${BASE_ROOTFS:-/var/tmp/bookworm-rootfs}
RUNTIME=${PODMAN_RUNTIME:-runc}
MARKER=.outbox-base-image
BUILD_LOG=${BUILD_LOG:-/var/tmp/outbox-image-build.log}
cd "$(dirname "$0")/.."

say() { printf 'build-image: %s\n' "$*" >&2; }
unavailable() { say "UNAVAILABLE: $*"; exit 3; }

t0=$(date +%s)

# 1. podman
pkgs=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs)
if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
	say "installing ${pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >&2 ||
		{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >&2; } ||
		unavailable "could not install ${pkgs[*]}"
fi

# 2. containers.conf
if [ ! -e /etc/containers/containers.conf ]; then
	say "writing /etc/containers/containers.conf (default_ulimits = [])"
	mkdir -p /etc/containers
	printf '[containers]\ndefault_ulimits = []\n' >/etc/containers/containers.conf
fi

# 3. the base image
if ! podman image exists localhost/debian:12; then
	if [ ! -f "$ROOTFS/$MARKER" ]; then
		mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
		mirror=${mirror:-$(sed -n 's/^deb \(http[^ ]*\/debian\) .*/\1/p' /etc/apt/sources.list 2>/dev/null | head -n 1)}
		[ -n "$mirror" ] || unavailable "no Debian mirror in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
		if [ -e "$ROOTFS" ]; then
			grep -q " $ROOTFS/" /proc/mounts && unavailable "$ROOTFS has something mounted inside"
			say "removing the incomplete $ROOTFS"
			rm -rf --one-file-system "$ROOTFS"
		fi
		say "debootstrap --variant=minbase bookworm $ROOTFS $mirror"
		debootstrap --variant=minbase bookworm "$ROOTFS" "$mirror" >"$ROOTFS.debootstrap.log" 2>&1 || {
			tail -n 20 "$ROOTFS.debootstrap.log" >&2
			unavailable "debootstrap failed (log: $ROOTFS.debootstrap.log)"
		}
		rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
		date -u +%FT%TZ >"$ROOTFS/$MARKER"
		say "debootstrap done in $(($(date +%s) - t0)) s"
	fi
	say "podman import $ROOTFS as localhost/debian:12"
	tar -C "$ROOTFS" --exclude="./$MARKER" -c . | podman import -q - localhost/debian:12 >/dev/null ||
		unavailable "podman import failed"
fi
# The names FROM lines resolve to with podman's short-name rules: the
# docker.io/library/ ones (deploy/Dockerfile's build stage uses debian:12, its
# runtime stage is FROM scratch; deploy/compose/redis.Dockerfile debian:12-slim).
lib=docker.io/library
podman tag localhost/debian:12 "$lib/debian:12" "$lib/debian:12-slim"

# Can podman run a container at all here? (Otherwise the build's RUN steps fail.)
podman --runtime "$RUNTIME" run --rm --network host localhost/debian:12 true ||
	unavailable "podman --runtime $RUNTIME cannot run a container on this machine"

# 4. the image
say "podman --runtime $RUNTIME build -f deploy/Dockerfile -t $TAG . (log: $BUILD_LOG)"
t1=$(date +%s)
podman --runtime "$RUNTIME" build --network host --pull=never --format docker \
	-f deploy/Dockerfile -t "$TAG" . >"$BUILD_LOG" 2>&1 || {
	tail -n 40 "$BUILD_LOG" >&2
	say "build failed (log: $BUILD_LOG)"
	exit 1
}
say "built $TAG in $(($(date +%s) - t1)) s (total $(($(date +%s) - t0)) s)"

# 5. size
size=$(podman image inspect --format '{{.Size}}' "$TAG")
say "image $TAG size: $size bytes ($((size / 1000000)) MB)"
