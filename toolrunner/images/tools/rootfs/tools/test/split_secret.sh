#!/bin/sh
# split_secret.sh NAME: print the secret NAME in two writes, half a second apart, so it reaches
# the runner in two chunks.
v=$(awk -v n="$1" 'BEGIN { printf "%s", ENVIRON[n] }')
half=$((${#v} / 2))
printf 'secret is: %s' "$(printf '%s' "$v" | head -c "$half")"
sleep 0.5
printf '%s done\n' "$(printf '%s' "$v" | tail -c +$((half + 1)))"
