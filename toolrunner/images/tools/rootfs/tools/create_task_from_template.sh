#!/bin/sh
# create_task_from_template TEMPLATE TARGET [NODE | SPEC_JSON] -> {"task_id", "status", ...}
# SPEC_JSON is the reviewed template the checkpoint resolved, TARGET already replaced by the
# target (docs/skills.md); the lab's fake recon API queues it and echoes it back.
. /tools/lib.sh
[ $# -eq 2 ] || [ $# -eq 3 ] || fail usage "create_task_from_template TEMPLATE TARGET [NODE | SPEC_JSON]"
[ -n "$1" ] || fail invalid_template "template is empty"
[ -n "$2" ] || fail invalid_target "target is empty"
node=${3:-}
spec=null
case "$node" in
\{*\})
	spec=$node
	node=''
	;;
esac
if [ "$spec" = null ]; then
	task_id=$(short_id task "$1" "$2" "$node")
else
	task_id=$(short_id task "$1" "$2" "$spec")
fi
printf '{"task_id":%s,"status":"queued","template":%s,"target":%s,"node":%s,"spec":%s}\n' \
	"$(json_str "$task_id")" "$(json_str "$1")" "$(json_str "$2")" "$(json_str "$node")" "$spec"
