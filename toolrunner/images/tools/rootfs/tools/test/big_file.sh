#!/bin/sh
# big_file.sh MB: try to write a file of MB megabytes into /tmp; report what the kernel allowed.
dd if=/dev/zero of=/tmp/big bs=1M count="$1" 2>&1
echo "rc=$?"
echo "size=$(wc -c < /tmp/big)"
