#!/bin/sh
# Make sure a Docker engine answers: install Debian's docker.io when `docker` is missing,
# start dockerd in the background when no engine answers, wait until `docker info` works.
# Anything it cannot do, it says how to do by hand, and exits non-zero.
set -u

WAIT_SECONDS=${WAIT_SECONDS:-60}
LOG=${DOCKERD_LOG:-/tmp/dockerd.log}

say() { echo "ensure-docker: $*" >&2; }
sudo_cmd() {
	if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}
# apt-get, quiet and non-interactive, as root; its own output is dropped.
apt_get() { sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get -qq "$@" >/dev/null; }
how_to() {
	say "$1"
	cat >&2 <<'HELP'
ensure-docker: to get a Docker engine by hand (Debian/Ubuntu):
    sudo apt-get update && sudo apt-get install -y docker.io busybox-static
    sudo dockerd >/tmp/dockerd.log 2>&1 &        # or: sudo systemctl start docker
    docker info                                  # must answer; as non-root: sudo usermod -aG docker $USER
  or point DOCKER_HOST at a reachable engine (e.g. DOCKER_HOST=unix:///run/docker.sock).
HELP
	exit 1
}

if ! command -v dockerd >/dev/null 2>&1; then
	command -v apt-get >/dev/null 2>&1 || how_to "docker is not installed and apt-get is not available"
	say "installing docker.io with apt-get"
	apt_get update && apt_get install -y docker.io ||
		how_to "apt-get install docker.io failed (no root, or no package mirror)"
	# Optional: gVisor's runsc, for tools whose definition asks for `runtime: runsc`.
	apt_get install -y runsc 2>/dev/null ||
		say "could not install runsc (optional: the gVisor runtime; tools asking for it get runtime_unavailable)"
fi
if [ ! -x /usr/bin/busybox ] && command -v apt-get >/dev/null 2>&1; then
	apt_get install -y busybox-static ||
		say "could not install busybox-static (needed by scripts/build-images.sh)"
fi

if ! command -v mmdebstrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
	apt_get install -y mmdebstrap ||
		say "could not install mmdebstrap (needed by scripts/build-warden-image.sh for warden's own image)"
fi

note_runsc() {
	if command -v runsc >/dev/null 2>&1 && ! docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
		say "note: runsc is installed but this engine has no 'runsc' runtime (add it to daemon.json to use gVisor)"
	fi
}

if docker info >/dev/null 2>&1; then
	note_runsc
	exit 0
fi

if [ -n "${DOCKER_HOST:-}" ]; then
	how_to "DOCKER_HOST=$DOCKER_HOST is set but no engine answers there"
fi
if command -v dockerd >/dev/null 2>&1 && ! pgrep -x dockerd >/dev/null 2>&1; then
	say "starting dockerd in the background (log: $LOG)"
	ARGS=""
	RUNSC=$(command -v runsc 2>/dev/null || true)
	if [ -n "$RUNSC" ] && [ ! -e /etc/docker/daemon.json ]; then
		# A config file in a fresh private folder: a file another user planted at a fixed path
		# must never be what a root dockerd reads. runsc's own netstack cannot attach to Docker's
		# network namespace everywhere (in some VMs it refuses it as the root namespace), so
		# gVisor sandboxes get no network at all.
		CONFIG_DIR=$(mktemp -d "${TMPDIR:-/tmp}/warden-dockerd.XXXXXX") &&
			printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--network=none"]}}}\n' "$RUNSC" \
				>"$CONFIG_DIR/daemon.json" &&
			ARGS="--config-file $CONFIG_DIR/daemon.json" &&
			say "registering gVisor's runsc as the runtime 'runsc' ($CONFIG_DIR/daemon.json)" ||
			say "could not write a daemon config; starting dockerd without the runsc runtime"
	elif [ -n "$RUNSC" ]; then
		say "/etc/docker/daemon.json exists: add runsc to its runtimes there to use gVisor"
	fi
	if [ "$(id -u)" = 0 ]; then
		# shellcheck disable=SC2086
		nohup dockerd $ARGS >"$LOG" 2>&1 &
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo -n sh -c "nohup dockerd $ARGS >'$LOG' 2>&1 &"
	else
		how_to "dockerd is not running and starting it needs root"
	fi
fi

i=0
while [ "$i" -lt "$WAIT_SECONDS" ]; do
	if docker info >/dev/null 2>&1; then
		say "Docker engine is up"
		note_runsc
		exit 0
	fi
	sleep 1
	i=$((i + 1))
done
if [ -r "$LOG" ]; then
	say "last lines of $LOG:"
	tail -n 20 "$LOG" >&2
fi
how_to "no Docker engine answered within ${WAIT_SECONDS}s"
