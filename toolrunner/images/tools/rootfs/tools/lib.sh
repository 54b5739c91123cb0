# Shared helpers for the tool scripts. Sourced, never run.

# json_str VALUE: VALUE as a JSON string literal (quotes included).
json_str() {
	printf '%s' "$1" | awk 'BEGIN { ORS = ""; printf "\"" }
		{
			gsub(/\\/, "\\\\"); gsub(/"/, "\\\""); gsub(/\t/, "\\t"); gsub(/\r/, "\\r")
			gsub(/[\001-\037]/, "?")
			if (NR > 1) printf "\\n"
			printf "%s", $0
		}
		END { printf "\"" }'
}

# fail CODE MESSAGE: a JSON error on stdout, exit status 2 (bad input).
fail() {
	printf '{"error":%s,"message":%s}\n' "$(json_str "$1")" "$(json_str "$2")"
	exit 2
}

# short_id PREFIX PARTS...: a stable id derived from the inputs.
short_id() {
	prefix=$1
	shift
	printf '%s\n' "$@" | sha256sum | cut -c1-12 | sed "s/^/$prefix-/"
}
