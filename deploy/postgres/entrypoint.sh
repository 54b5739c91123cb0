#!/bin/sh
# warden-postgres:local's entrypoint (scripts/build-postgres-image.sh). It starts as root only to
# make and own the data folder and to read the password file; PostgreSQL itself runs as `postgres`.
#
# First start (an empty $PGDATA): a cluster whose superuser `postgres` logs in over the container's
# own socket only (peer), and the application role and database (WARDEN_DB_USER, WARDEN_DB, both
# `warden` by default) with the password read from WARDEN_STORE_PASSWORD_FILE, the same file the
# warden processes read. Over the network only that role reaches that database, with SCRAM.
# Later starts use the cluster as it is: the password is the one set at the first start.
#
# Arguments are passed to `postgres` (e.g. `-c max_connections=200`).
set -eu

PGDATA=${PGDATA:-/var/lib/postgresql/data}
DB=${WARDEN_DB:-warden}
DB_USER=${WARDEN_DB_USER:-warden}
BIN=/usr/lib/postgresql/15/bin
SOCKETS=/run/postgresql
export PGDATA

say() { echo "warden-postgres: $*" >&2; }
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups -- "$@"; }

mkdir -p "$PGDATA" "$SOCKETS"
chown postgres:postgres "$PGDATA" "$SOCKETS"
chmod 0700 "$PGDATA"

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	password_file=${WARDEN_STORE_PASSWORD_FILE:-}
	if [ -z "$password_file" ] || [ ! -s "$password_file" ]; then
		say "the first start needs the application role's password: set WARDEN_STORE_PASSWORD_FILE to a file that holds it"
		exit 1
	fi
	# warden reads the file with the whitespace at its ends taken off; psql would keep all but a
	# last newline: one line without spaces at its ends is the password both read alike.
	if [ "$(grep -c '' "$password_file")" != 1 ] || grep -q '^[[:space:]]\|[[:space:]]$' "$password_file"; then
		say "$password_file: the password must be one line, without spaces at its ends"
		exit 1
	fi
	say "making the cluster in $PGDATA (database $DB, role $DB_USER)"
	as_postgres "$BIN/initdb" --pgdata="$PGDATA" --username=postgres --encoding=UTF8 --locale=C.UTF-8 \
		--auth-local=peer --auth-host=reject >/dev/null
	# What reaches the database over the network: the application role, to its database, with SCRAM.
	printf 'host %s %s all scram-sha-256\n' "$DB" "$DB_USER" >>"$PGDATA/pg_hba.conf"
	# A private socket while the role is made: nothing (not the health check) sees this server.
	init_sockets=$(mktemp -d /run/postgresql-init.XXXXXX)
	chown postgres:postgres "$init_sockets"
	as_postgres "$BIN/pg_ctl" --silent --wait --options="-c listen_addresses='' -c jit=off -c unix_socket_directories=$init_sockets" start
	# The password goes through psql's backquote \set: never on a command line (ps would show it).
	cp "$password_file" "$init_sockets/password" && chown postgres "$init_sockets/password" && chmod 0400 "$init_sockets/password"
	as_postgres "$BIN/psql" --quiet --no-psqlrc -v ON_ERROR_STOP=1 --host="$init_sockets" --username=postgres \
		--dbname=postgres -v db="$DB" -v role="$DB_USER" <<SQL
\\set password \`cat $init_sockets/password\`
SET password_encryption = 'scram-sha-256';
CREATE ROLE :"role" LOGIN PASSWORD :'password';
CREATE DATABASE :"db" OWNER :"role";
REVOKE ALL ON DATABASE :"db" FROM PUBLIC;
SQL
	rm -f "$init_sockets/password"
	as_postgres "$BIN/pg_ctl" --silent --wait --mode=fast stop
	rmdir "$init_sockets" 2>/dev/null || rm -rf "$init_sockets"
	say "cluster ready"
fi

exec setpriv --reuid=postgres --regid=postgres --init-groups -- \
	"$BIN/postgres" -c listen_addresses='*' -c jit=off -c unix_socket_directories="$SOCKETS" "$@"
