#!/bin/sh
# A classic fork bomb: every process starts two more. The top shell keeps starting bombs until
# its own fork fails, so the run ends only when the pids limit bites (or the timeout kills it),
# never because the first generation happened to exit early.
bomb() { bomb | bomb & }
while :; do bomb; done
