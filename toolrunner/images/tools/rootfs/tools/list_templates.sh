#!/bin/sh
# list_templates --reviewed [TEMPLATE_JSON...] -> [{"name", "version", "description", "spec"}, ...]
# The checkpoint fills the call with the run's tenant's reviewed templates (docs/skills.md); the
# toolrunner passes each as one JSON argument after --reviewed, and this prints them as one array
# (an empty catalog is []). Without --reviewed (a tool definition from before the catalog served
# templates) it prints the fake recon API's own fixed list, as it always did.
. /tools/lib.sh
if [ "${1:-}" != --reviewed ]; then
	[ $# -eq 0 ] || fail usage "list_templates --reviewed [TEMPLATE_JSON...]"
	cat <<'JSON'
[{"name":"nginx-restart","description":"restart nginx on a node"},{"name":"disk-usage","description":"report disk usage on a node"},{"name":"patch-os","description":"apply pending OS updates on a node"}]
JSON
	exit 0
fi
shift
printf '['
sep=''
for template in "$@"; do
	case "$template" in
	\{*\}) ;;
	*) fail usage "list_templates takes templates as JSON objects" ;;
	esac
	printf '%s%s' "$sep" "$template"
	sep=','
done
printf ']\n'
