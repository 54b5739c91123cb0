#!/bin/sh
# env.sh NAME: print the value of the environment variable NAME, and the whole environment.
value=$(awk -v n="$1" 'BEGIN { print ENVIRON[n] }')
printf 'value=%s\n' "$value"
env | sort
