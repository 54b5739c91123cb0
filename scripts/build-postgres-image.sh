#!/bin/sh
# Build warden-postgres:local, the PostgreSQL a fleet's compose file runs (deploy/compose.fleet.yaml),
# with no image registry: Debian bookworm's postgresql-15 and its dependencies, made with mmdebstrap
# (variant essential: no apt, no compiler) and loaded with `docker import`, as warden-base:local is
# by scripts/build-warden-image.sh. The entrypoint (deploy/postgres/entrypoint.sh) makes the cluster
# at its first start with the application role's password read from a file, never from the
# environment or the compose file.
#
# Skipped when its `warden.inputs` label matches the hash of what it is made of (the mmdebstrap
# arguments, the sources, this script and the entrypoint); FORCE=1 rebuilds it (e.g. for Debian
# security updates).
#
# Environment: DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, TAG (default warden-postgres:local).
set -eu

here=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SECURITY=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
TAG=${TAG:-warden-postgres:local}
ENTRYPOINT=$here/deploy/postgres/entrypoint.sh

say() { echo "build-postgres-image: $*" >&2; }
t0=$(date +%s)

case ${1:-} in
-h | --help)
	sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
	exit 0
	;;
"") ;;
*)
	echo "usage: scripts/build-postgres-image.sh" >&2
	exit 2
	;;
esac

if ! docker info >/dev/null 2>&1; then
	say "no Docker engine answers; run scripts/ensure-docker.sh first"
	exit 1
fi

# The packaged cluster `main` is not made at install (createcluster.d): the entrypoint makes its
# own in the data volume, so the image carries no database of its own. Docs, man pages and locales
# are left out, every package's copyright file kept, as in warden-base. So is the JIT (LLVM, 131 MB
# of the 362): warden's statements are short lookups and inserts that JIT never pays off for, and
# the entrypoint runs PostgreSQL with jit=off.
args="--variant=essential
--include=postgresql-15
--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
--essential-hook=mkdir -p \"\$1/etc/postgresql-common/createcluster.d\" && echo 'create_main_cluster = false' > \"\$1/etc/postgresql-common/createcluster.d/warden.conf\"
--customize-hook=rm -rf \"\$1/var/lib/postgresql/15\" \"\$1/etc/postgresql/15\" \"\$1/var/cache/apt\" \"\$1/var/lib/apt/lists\"
--dpkgopt=path-exclude=/usr/share/doc/*
--dpkgopt=path-include=/usr/share/doc/*/copyright
--dpkgopt=path-exclude=/usr/share/man/*
--dpkgopt=path-exclude=/usr/share/info/*
--dpkgopt=path-exclude=/usr/share/locale/*
--dpkgopt=path-exclude=/usr/lib/*/libLLVM-*
--dpkgopt=path-exclude=/usr/lib/postgresql/15/lib/bitcode/*
--dpkgopt=path-exclude=/usr/lib/postgresql/15/lib/llvmjit*
bookworm"
sources="deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECURITY bookworm-security main"

inputs=$({
	printf '%s\n%s\n' "$args" "$sources"
	sha256sum "$0" "$ENTRYPOINT" | cut -d' ' -f1
} | sha256sum | cut -d' ' -f1)
current=$(docker image inspect --format '{{ index .Config.Labels "warden.inputs" }}' "$TAG" 2>/dev/null || true)
if [ "${FORCE:-0}" != 1 ] && [ "$current" = "$inputs" ]; then
	say "$TAG is up to date ($(docker image inspect --format '{{.Id}}' "$TAG"))"
	exit 0
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
	say "mmdebstrap is missing; install it: apt-get install -y mmdebstrap"
	exit 1
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/warden-postgres.XXXXXX")
trap 'rm -rf "$stage"' EXIT INT TERM
say "making $TAG from Debian packages (mmdebstrap)"
# The hooks' arguments hold spaces: split the list on newlines only.
old_ifs=$IFS
IFS='
'
# shellcheck disable=SC2086 # args is a list of lines on purpose
set -- $args
IFS=$old_ifs
if ! printf '%s\n' "$sources" | mmdebstrap --quiet \
	--customize-hook="copy-in $ENTRYPOINT /usr/local/bin" \
	"$@" "$stage/rootfs.tar" - >"$stage/mmdebstrap.log" 2>&1; then
	cat "$stage/mmdebstrap.log" >&2
	say "mmdebstrap failed"
	exit 1
fi
# A file first, not a pipe: a failed mmdebstrap must never be imported as a half image. `docker
# import` cannot set a stop signal, so a one-line build on top of the imported root sets it (and the
# rest): SIGINT is PostgreSQL's fast shutdown, where SIGTERM would wait for every client to leave.
docker import "$stage/rootfs.tar" "$TAG-rootfs" >/dev/null
rm -f "$stage/rootfs.tar"
if ! docker build --label "warden.inputs=$inputs" --label org.opencontainers.image.title=warden-postgres \
	--tag "$TAG" - >"$stage/build.log" 2>&1 <<DOCKERFILE; then
FROM $TAG-rootfs
ENV PATH=/usr/lib/postgresql/15/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 PGDATA=/var/lib/postgresql/data
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=3 CMD ["setpriv", "--reuid=postgres", "--regid=postgres", "--clear-groups", "--", "pg_isready", "--quiet", "--host=/run/postgresql", "--username=postgres", "--dbname=postgres"]
ENTRYPOINT ["/usr/local/bin/entrypoint.sh"]
DOCKERFILE
	cat "$stage/build.log" >&2
	say "docker build of $TAG failed"
	exit 1
fi
docker rmi "$TAG-rootfs" >/dev/null
say "built $TAG ($(docker image inspect --format '{{.Id}}' "$TAG"), $(docker image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1/1e6}')) in $(($(date +%s) - t0))s"
