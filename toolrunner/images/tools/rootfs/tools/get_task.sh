#!/bin/sh
# get_task TASK_ID -> {"task_id", "status"}
. /tools/lib.sh
[ $# -eq 1 ] || fail usage "get_task TASK_ID"
case "$1" in
task-*[!a-z0-9]* | task-) fail unknown_task "no task $1" ;;
task-*) ;;
*) fail unknown_task "no task $1" ;;
esac
printf '{"task_id":%s,"status":"succeeded","result":{"summary":"template finished without findings"}}\n' \
	"$(json_str "$1")"
