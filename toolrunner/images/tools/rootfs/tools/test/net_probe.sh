#!/bin/sh
# net_probe.sh: list the network interfaces and try to open a TCP connection out.
echo "interfaces: $(ls /sys/class/net | tr '\n' ' ')"
if nc -w 2 "${1:-1.1.1.1}" "${2:-53}" </dev/null 2>&1; then
	echo "connect=ok"
else
	echo "connect=failed"
fi
