#!/bin/sh
# create_task_from_template TEMPLATE TARGET NODE -> {"task_id", "status", ...}
. /tools/lib.sh
[ $# -eq 3 ] || fail usage "create_task_from_template TEMPLATE TARGET NODE"
[ -n "$1" ] || fail invalid_template "template is empty"
task_id=$(short_id t "$1" "$2" "$3")
printf '{"task_id":%s,"status":"queued","template":%s,"target":%s,"node":%s}\n' \
	"$(json_str "$task_id")" "$(json_str "$1")" "$(json_str "$2")" "$(json_str "$3")"
