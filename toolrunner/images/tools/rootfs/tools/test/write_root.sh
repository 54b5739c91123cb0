#!/bin/sh
# write_root.sh: try to write the root filesystem, then the tmpfs.
if touch /probe 2>/dev/null; then echo "root=writable"; else echo "root=read-only"; fi
if touch /tools/probe 2>/dev/null; then echo "tools=writable"; else echo "tools=read-only"; fi
if echo hi > /tmp/probe 2>/dev/null; then echo "tmp=writable"; else echo "tmp=read-only"; fi
