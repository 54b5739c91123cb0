#!/bin/sh
# Print each argument on its own line, bracketed, to show argv arrived unsplit and unexpanded.
. /tools/lib.sh
printf '{"argc":%d}\n' $#
for a in "$@"; do printf '[%s]\n' "$a"; done
