#!/bin/sh
# lookup_order ORDER_ID -> {"order_id", "status", "amount", "currency"}
. /tools/lib.sh
[ $# -eq 1 ] || fail usage "lookup_order ORDER_ID"
[ -n "$1" ] || fail invalid_order "order id is empty"
printf '{"order_id":%s,"status":"delivered","amount":42.5,"currency":"EUR"}\n' "$(json_str "$1")"
