#!/usr/bin/env bash
# `dsv4 serve` end to end on 127.0.0.1: the tiny model on the CPU, driven by a client script
# (tests/e2e/*_e2e.py, run with the .venv's python that scripts/setup.sh makes, which has the
# official openai client) that gets the base URL, the API key and the model name; then SIGTERM
# must drain and stop the server. Usage: serve_openai.sh DSV4 PYTHON CLIENT [SERVE_FLAGS...]
set -euo pipefail
dsv4=$1
python=$2
client=$3
shift 3
work=$(mktemp -d)
source "$(dirname "$0")/serve_lib.sh"
trap 'stop_server_now; rm -rf "$work"' EXIT

start_server "$dsv4" "$work" "$@"
timeout 600 "$python" "$client" "$url" sekrit tiny || fail "the client checks"
# The logs vLLM's users read: a line per request answered (uvicorn's access log) and, with
# --log-stats-interval, the engine's stats line while it served.
grep -qE '^serve: 127\.0\.0\.1:[0-9]+ "POST /v1/(chat/)?completions HTTP/1\.1" 200$' "$work/serve.log" ||
  fail "no access-log line for a completion"
if [ "$(basename "$client")" = openai_client_e2e.py ]; then  # it sends a wrong key once
  grep -qE '^serve: 127\.0\.0\.1:[0-9]+ "GET /v1/models HTTP/1\.1" 401$' "$work/serve.log" ||
    fail "no access-log line for a refused request"
fi
if [[ " $* " == *" --log-stats-interval "* ]]; then
  grep -qE '^serve: Avg prompt throughput: [0-9.]+ tokens/s, Avg generation throughput: [0-9.]+ tokens/s, Running: [0-9]+ reqs, Waiting: [0-9]+ reqs, KV cache usage: [0-9.]+%, Prefix cache hit rate: ' \
    "$work/serve.log" || fail "no stats line"
fi
stop_server
# Without --served-model-name, clients name the model by its --model argument, as in vLLM; with
# --generation-config FOLDER its generation_config.json gives requests their defaults (here
# greedy, 3 tokens).
mkdir -p "$work/generation"
echo '{"temperature": 0, "max_new_tokens": 3, "eos_token_id": 1}' >"$work/generation/generation_config.json"
"$dsv4" serve --model "$work/tiny" --port 0 --max-model-len 256 --threads 2 --disable-log-stats \
  --generation-config "$work/generation" 2>"$work/named.log" &
server_pid=$!
for _ in $(seq 1 300); do
  grep -q "serve: ready" "$work/named.log" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || fail "the unnamed server exited: $(cat "$work/named.log")"
  sleep 0.2
done
port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/named.log")
name=$("$python" -c "import json, sys, urllib.request; print(json.load(urllib.request.urlopen(sys.argv[1]))['data'][0]['id'])" \
  "http://127.0.0.1:$port/v1/models") || fail "no model list: $(cat "$work/named.log")"
[ "$name" = "$work/tiny" ] || fail "the unnamed server calls its model '$name', not '$work/tiny'"
grep -q "serve: default sampling parameters from $work/generation/generation_config.json: temperature=0, max_tokens=3" \
  "$work/named.log" || fail "no line on the generation config's defaults: $(cat "$work/named.log")"
tokens=$("$python" -c "
import json, sys, urllib.request
body = json.dumps({'model': sys.argv[2], 'prompt': 'Hello'}).encode()
request = urllib.request.Request(sys.argv[1], data=body, headers={'Content-Type': 'application/json'})
print(json.load(urllib.request.urlopen(request))['usage']['completion_tokens'])" \
  "http://127.0.0.1:$port/v1/completions" "$name") || fail "no completion: $(cat "$work/named.log")"
[ "$tokens" = 3 ] || fail "a completion without max_tokens got $tokens tokens, not the generation config's 3"
kill -TERM "$server_pid"
wait "$server_pid" || fail "the unnamed server exited with status $?"
server_pid=""
echo "ok"
