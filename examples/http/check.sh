#!/usr/bin/env bash
# Ask a checkpoint's HTTP door whether an agent may make one tool call, with curl alone:
# StartRun (the checkpoint mints the run and signs its token), then Check in that run.
#
#   WARDEN_HTTP=http://127.0.0.1:7402 WARDEN_TOKEN=... ./check.sh [TOOL] [ARGUMENTS_JSON]
#
# Prints both answers (JSON). Exit 0 on ALLOW, 1 on any other verdict, 2 on an error answer.
set -euo pipefail
base=${WARDEN_HTTP:-http://127.0.0.1:7402}/warden.checkpoint.v1.CheckpointService
tool=${1:-get_task}
arguments=${2:-'{"task_id":"task-1"}'}
: "${WARDEN_TOKEN:?set WARDEN_TOKEN to a token of the checkpoint token file}"

call() {  # METHOD JSON: the answer's body; an error answer goes to stderr, and the script exits 2
  local out status
  out=$(mktemp)
  status=$(curl -sS -o "$out" -w '%{http_code}' -X POST "$base/$1" \
    -H 'Content-Type: application/json' -H "Authorization: Bearer $WARDEN_TOKEN" --data-binary "$2")
  if [ "$status" != 200 ]; then
    echo "HTTP $status: $(cat "$out")" >&2
    rm -f "$out"
    exit 2
  fi
  cat "$out"
  rm -f "$out"
}

started=$(call StartRun '{"agent":"recon","person":"alice","mode":"RUN_MODE_INTERACTIVE"}')
echo "$started"
run_token=$(printf '%s' "$started" | sed -n 's/.*"runToken": *"\([^"]*\)".*/\1/p')
[ -n "$run_token" ] || exit 1
answer=$(call Check "{\"run\":{\"runToken\":\"$run_token\"},\"toolCall\":{\"tool\":\"$tool\",\"arguments\":$arguments}}")
echo "$answer"
case $answer in *'"verdict": "VERDICT_ALLOW"'* | *'"verdict":"VERDICT_ALLOW"'*) exit 0 ;; *) exit 1 ;; esac
