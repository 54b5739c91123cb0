#!/bin/sh
# huge_writer.sh MB: START, MB megabytes of 'x' on stdout, END.
echo "START-OF-OUTPUT"
head -c $(($1 * 1048576)) /dev/zero | tr '\000' 'x'
echo
echo "END-OF-OUTPUT"
