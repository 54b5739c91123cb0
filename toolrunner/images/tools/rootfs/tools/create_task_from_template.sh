#!/bin/sh
# create_task_from_template TEMPLATE TARGET [NODE] -> {"task_id", "status", ...}
. /tools/lib.sh
[ $# -eq 2 ] || [ $# -eq 3 ] || fail usage "create_task_from_template TEMPLATE TARGET [NODE]"
[ -n "$1" ] || fail invalid_template "template is empty"
[ -n "$2" ] || fail invalid_target "target is empty"
node=${3:-}
task_id=$(short_id task "$1" "$2" "$node")
printf '{"task_id":%s,"status":"queued","template":%s,"target":%s,"node":%s}\n' \
	"$(json_str "$task_id")" "$(json_str "$1")" "$(json_str "$2")" "$(json_str "$node")"
