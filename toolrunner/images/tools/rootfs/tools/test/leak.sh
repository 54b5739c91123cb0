#!/bin/sh
# leak.sh NAME: print the secret NAME in every form a careless tool might (plain, base64, hex, URL).
v=$(awk -v n="$1" 'BEGIN { printf "%s", ENVIRON[n] }')
echo "plain: $v"
printf 'b64: %s\n' "$(printf '%s' "$v" | base64 | tr -d '\n')"
printf 'hex: %s\n' "$(printf '%s' "$v" | od -An -tx1 | tr -d ' \n')"
printf 'url: %s\n' "$(printf '%s' "$v" | sed 's/ /%20/g; s/\//%2F/g; s/+/%2B/g; s/=/%3D/g; s/&/%26/g')"
echo "aws: AKIAIOSFODNN7EXAMPLE"
echo "auth: Authorization: Bearer abcdefghijklmnopqrstuvwxyz0123456789"
