#!/bin/sh
# sleep.sh SECONDS: say so, sleep, say done.
echo "started"
sleep "$1"
echo "done"
