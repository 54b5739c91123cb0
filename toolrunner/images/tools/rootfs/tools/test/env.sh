#!/bin/sh
# env.sh NAME: print the value of the environment variable NAME, and the whole environment.
value=$(printenv "$1")
printf 'value=%s\n' "$value"
env | sort
