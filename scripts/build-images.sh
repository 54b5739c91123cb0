#!/bin/sh
# Build the local images the toolrunner's tools and tests run in. No registry is needed:
# the root filesystem is Debian's static busybox plus toolrunner/images/<name>/rootfs, put
# together in a temporary folder and loaded with `docker import`.
#
# Skips an image whose `warden.inputs` label already matches the inputs' hash; FORCE=1 rebuilds.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
busybox=${BUSYBOX:-/usr/bin/busybox}

if ! command -v docker >/dev/null 2>&1; then
	echo "build-images: docker is not installed; run scripts/ensure-docker.sh first" >&2
	exit 1
fi
if ! docker info >/dev/null 2>&1; then
	echo "build-images: no Docker engine answers; run scripts/ensure-docker.sh first" >&2
	exit 1
fi
if [ ! -x "$busybox" ]; then
	echo "build-images: $busybox is missing; install it: apt-get install -y busybox-static" >&2
	exit 1
fi

build() {
	name=$1
	tag=$2
	src="$here/toolrunner/images/$name/rootfs"
	inputs=$(
		cd "$src"
		{
			sha256sum "$busybox" | cut -d' ' -f1
			find . -type f | LC_ALL=C sort | xargs sha256sum
			find . -type f -perm -u+x | LC_ALL=C sort
		} | sha256sum | cut -d' ' -f1
	)
	current=$(docker image inspect --format '{{ index .Config.Labels "warden.inputs" }}' "$tag" 2>/dev/null || true)
	if [ "${FORCE:-0}" != 1 ] && [ "$current" = "$inputs" ]; then
		echo "build-images: $tag is up to date ($(docker image inspect --format '{{.Id}}' "$tag"))"
		return 0
	fi
	stage=$(mktemp -d)
	trap 'rm -rf "$stage"' EXIT
	mkdir -p "$stage/bin" "$stage/tmp" "$stage/proc" "$stage/sys" "$stage/dev" "$stage/etc"
	cp "$busybox" "$stage/bin/busybox"
	for applet in $("$busybox" --list); do
		[ "$applet" = busybox ] || ln -s busybox "$stage/bin/$applet"
	done
	cp -R "$src/." "$stage/"
	chmod 1777 "$stage/tmp"
	# Root owns every file: the tool runs as nobody and must not be able to change them.
	tar --numeric-owner --owner=0 --group=0 -C "$stage" -cf - . |
		docker import \
			--change 'USER 65534:65534' \
			--change 'WORKDIR /tmp' \
			--change 'ENV PATH=/bin' \
			--change "LABEL warden.inputs=$inputs" \
			--change 'LABEL org.opencontainers.image.title=warden-tools' \
			- "$tag" >/dev/null
	rm -rf "$stage"
	trap - EXIT
	echo "build-images: built $tag ($(docker image inspect --format '{{.Id}}' "$tag"))"
}

build tools warden-tools:local
