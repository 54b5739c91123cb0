#!/bin/sh
# Build warden's own container images with no image registry (none is reachable here):
#
#   warden-base:local  Debian bookworm's python3, tini and libstdc++6, made from Debian packages with mmdebstrap
#                      (variant essential: no apt, no compiler) and loaded with `docker import`
#   warden:local       the checkpoint: a venv of warden[checkpoint] on that base (deploy/Dockerfile)
#   warden-all:local   the same with warden[all], for the driver and the toolrunner (only when asked:
#                      `scripts/build-warden-image.sh all`, or `checkpoint all` for both)
#
# The wheels come from PyPI through the host's pip (`pip wheel`, into a staging folder that is the
# build context), so `docker build` itself needs no network, and the image never holds pip.
# Each image is skipped when its `warden.inputs` label matches the hash of what it is made of
# (for warden:local: the base image, deploy/Dockerfile, pyproject.toml and the package sources);
# FORCE=1 rebuilds all, FORCE_BASE=1 only the base (e.g. for Debian security updates).
#
# Environment: PYTHON (host interpreter whose pip makes the wheels; must be Python 3.11 like the
# base, default python3), DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, BASE_TAG, TAG, TAG_ALL.
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
# The host interpreter whose pip makes the wheels: PYTHON, else python3, else the project's .venv.
if [ -z "${PYTHON:-}" ]; then
	PYTHON=python3
	if ! python3 -m pip --version >/dev/null 2>&1 && [ -x "$here/.venv/bin/python" ]; then
		PYTHON=$here/.venv/bin/python
	fi
fi
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
BASE_TAG=${BASE_TAG:-warden-base:local}
TAG=${TAG:-warden:local}
TAG_ALL=${TAG_ALL:-warden-all:local}
# pip that installs the wheels inside the builder stage (run from its wheel; pinned so the image
# does not change with the host's pip)
PIP_VERSION=24.3.1

say() { echo "build-warden-image: $*" >&2; }
t0=$(date +%s)
took() { echo "$(($(date +%s) - t0))s"; }

usage() {
	cat <<'HELP'
usage: scripts/build-warden-image.sh [checkpoint] [all]

Build warden's container images locally, with no image registry:
  checkpoint  warden:local      warden[checkpoint]: `warden checkpoint serve` (the default)
  all         warden-all:local  warden[all]: also `warden driver serve` and `warden toolrunner serve`
Both rest on warden-base:local (Debian bookworm python3, tini, libstdc++6; made with mmdebstrap).
An image whose inputs did not change is skipped; FORCE=1 rebuilds everything, FORCE_BASE=1 the base.
Needs: a Docker engine (scripts/ensure-docker.sh), mmdebstrap (apt-get install mmdebstrap),
a host Python 3.11 with pip that reaches PyPI (PYTHON=...). See docs/deploy.md.
HELP
}

targets=""
for arg in "$@"; do
	case $arg in
	checkpoint | all) targets="$targets $arg" ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
[ -n "$targets" ] || targets=checkpoint

if ! docker info >/dev/null 2>&1; then
	say "no Docker engine answers; run scripts/ensure-docker.sh first"
	exit 1
fi

# --- the base: Debian packages only -------------------------------------------------------------
# essential (not minbase): no apt in the runtime; path-exclude keeps docs, man pages and locales
# out but every package's copyright file in. The merged-/usr hook avoids pulling usrmerge and perl.
base_args="--variant=essential --include=python3,tini,libstdc++6
--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
--dpkgopt=path-exclude=/usr/share/doc/*
--dpkgopt=path-include=/usr/share/doc/*/copyright
--dpkgopt=path-exclude=/usr/share/man/*
--dpkgopt=path-exclude=/usr/share/info/*
--dpkgopt=path-exclude=/usr/share/locale/*
bookworm"
sources="deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECURITY bookworm-security main"

label() { docker image inspect --format "{{ index .Config.Labels \"warden.inputs\" }}" "$1" 2>/dev/null || true; }
image_id() { docker image inspect --format '{{.Id}}' "$1"; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/warden-image.XXXXXX")
trap 'rm -rf "$stage"' EXIT INT TERM

base_inputs=$(printf '%s\n%s\n' "$base_args" "$sources" | sha256sum | cut -d' ' -f1)
if [ "${FORCE:-0}" != 1 ] && [ "${FORCE_BASE:-0}" != 1 ] && [ "$(label "$BASE_TAG")" = "$base_inputs" ]; then
	say "$BASE_TAG is up to date ($(image_id "$BASE_TAG"))"
else
	if ! command -v mmdebstrap >/dev/null 2>&1; then
		say "mmdebstrap is missing; install it: apt-get install -y mmdebstrap"
		exit 1
	fi
	say "making $BASE_TAG from Debian packages (mmdebstrap)"
	# shellcheck disable=SC2086 # base_args is a list of words on purpose
	if ! printf '%s\n' "$sources" | mmdebstrap --quiet $base_args "$stage/base.tar" - >"$stage/mmdebstrap.log" 2>&1; then
		cat "$stage/mmdebstrap.log" >&2
		say "mmdebstrap failed"
		exit 1
	fi
	# A file first, not a pipe: a failed mmdebstrap must never be imported as a half image.
	docker import \
		--change "LABEL warden.inputs=$base_inputs" \
		--change 'LABEL org.opencontainers.image.title=warden-base' \
		--change 'ENV PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8' \
		--change 'CMD ["python3"]' \
		"$stage/base.tar" "$BASE_TAG" >/dev/null
	rm -f "$stage/base.tar"
	say "built $BASE_TAG ($(image_id "$BASE_TAG")) at $(took)"
fi

# --- warden on it -------------------------------------------------------------------------------
# What the image is made of, in a fixed order: a change to any of these rebuilds it.
source_inputs=$(
	cd "$here"
	{
		image_id "$BASE_TAG"
		echo "pip $PIP_VERSION"
		find deploy/Dockerfile pyproject.toml README.md warden checkpoint driver toolrunner \
			-type f ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum
	} | sha256sum | cut -d' ' -f1
)

# The wheels of one extras set: deps/EXTRAS holds every dependency, warden/ warden's own wheel, so
# a change to warden's code leaves the builder's dependency layer cached.
make_wheels() {
	extras=$1
	if [ ! -d "$stage/src" ]; then
		if ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
			say "$PYTHON has no pip: set PYTHON to a Python 3.11 with pip (e.g. PYTHON=.venv/bin/python after make install)"
			exit 1
		fi
		host_py=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
		base_py=$(docker run --rm --network none "$BASE_TAG" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
		if [ "$host_py" != "$base_py" ]; then
			say "$PYTHON is Python $host_py but the image's is $base_py: the wheels must match; set PYTHON=python$base_py"
			exit 1
		fi
		# A copy of the sources: building in the work tree would leave build/ and *.egg-info there.
		mkdir -p "$stage/src" "$stage/ctx/warden" "$stage/ctx/pip"
		(cd "$here" && tar -cf - --exclude=__pycache__ --exclude='*.pyc' pyproject.toml README.md warden checkpoint driver toolrunner) |
			tar -C "$stage/src" -xf -
		if ! "$PYTHON" -m pip download --quiet --only-binary=:all: --no-deps --dest "$stage/pipdl" \
			"pip==$PIP_VERSION" >"$stage/pip.log" 2>&1; then
			cat "$stage/pip.log" >&2
			say "pip download pip==$PIP_VERSION failed"
			exit 1
		fi
		mv "$stage"/pipdl/pip-*.whl "$stage/ctx/pip/pip.whl"
	fi
	say "wheels for warden[$extras] with $PYTHON -m pip (at $(took))"
	rm -rf "$stage/ctx/deps-$extras" "$stage/ctx/warden"
	mkdir -p "$stage/ctx/warden"
	# pip's output goes to a file, shown only when it fails (a pip.conf naming absent local
	# indexes warns once per package).
	if ! "$PYTHON" -m pip wheel --quiet --wheel-dir "$stage/ctx/deps-$extras" "$stage/src[$extras]" \
		>"$stage/pip.log" 2>&1; then
		cat "$stage/pip.log" >&2
		say "pip wheel failed for warden[$extras]"
		exit 1
	fi
	mv "$stage/ctx/deps-$extras"/warden-*.whl "$stage/ctx/warden/"
}

build() {
	extras=$1
	tag=$2
	inputs=$(printf '%s %s\n' "$source_inputs" "$extras" | sha256sum | cut -d' ' -f1)
	if [ "${FORCE:-0}" != 1 ] && [ "$(label "$tag")" = "$inputs" ]; then
		say "$tag is up to date ($(image_id "$tag"))"
		return 0
	fi
	make_wheels "$extras"
	say "building $tag (warden[$extras]) at $(took)"
	# The classic builder's deprecation notice goes to the log too; the log is shown on failure.
	if ! docker build \
		--file "$here/deploy/Dockerfile" \
		--build-arg "BASE=$BASE_TAG" \
		--build-arg "EXTRAS=$extras" \
		--label "warden.inputs=$inputs" \
		--build-arg "VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$here/pyproject.toml")" \
		--tag "$tag" "$stage/ctx" >"$stage/build.log" 2>&1; then
		cat "$stage/build.log" >&2
		say "docker build of $tag failed"
		exit 1
	fi
	say "built $tag ($(image_id "$tag"), $(docker image inspect --format '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}')) at $(took)"
}

for target in $targets; do
	case $target in
	checkpoint) build checkpoint "$TAG" ;;
	all) build all "$TAG_ALL" ;;
	esac
done
