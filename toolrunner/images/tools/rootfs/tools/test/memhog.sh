#!/bin/sh
# memhog.sh MB: dd allocates and fills one buffer of MB megabytes.
echo "allocating $1 MB"
dd if=/dev/zero of=/dev/null bs="$1"M count=1 2>&1
echo "survived"
