#!/bin/sh
# spawn.sh N: start N background sleepers, saying so after each; the pids limit stops it early.
i=0
while [ "$i" -lt "$1" ]; do
	sleep 30 &
	i=$((i + 1))
	echo "spawned $i"
done
echo "all spawned"
