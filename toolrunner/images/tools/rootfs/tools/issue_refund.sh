#!/bin/sh
# issue_refund PAYMENT_OR_ORDER_ID AMOUNT [REASON] -> {"refund_id", "order_id", "amount", "status"}
. /tools/lib.sh
[ $# -eq 2 ] || [ $# -eq 3 ] || fail usage "issue_refund ORDER_ID AMOUNT [REASON]"
case "$2" in
'' | *[!0-9.]* | *.*.* | .*) fail invalid_amount "amount must be a positive number" ;;
esac
reason=${3:-}
refund_id=$(short_id r "$1" "$2" "$reason")
printf '{"refund_id":%s,"order_id":%s,"amount":%s,"reason":%s,"status":"issued"}\n' \
	"$(json_str "$refund_id")" "$(json_str "$1")" "$2" "$(json_str "$reason")"
