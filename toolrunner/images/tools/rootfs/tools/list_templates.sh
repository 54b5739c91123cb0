#!/bin/sh
# list_templates -> [{"name", "description"}, ...]
. /tools/lib.sh
[ $# -eq 0 ] || fail usage "list_templates takes no arguments"
cat <<'JSON'
[{"name":"nginx-restart","description":"restart nginx on a node"},{"name":"disk-usage","description":"report disk usage on a node"},{"name":"patch-os","description":"apply pending OS updates on a node"}]
JSON
