#!/bin/sh
# run_shell PROGRAM [ARGS...] -> {"exit_code", "output"}
# The program is executed directly from argv ("$@"): nothing here re-parses a command line.
. /tools/lib.sh
[ $# -ge 1 ] || fail usage "run_shell PROGRAM [ARGS...]"
out=$("$@" 2>&1)
rc=$?
printf '{"exit_code":%d,"output":%s}\n' "$rc" "$(json_str "$out")"
