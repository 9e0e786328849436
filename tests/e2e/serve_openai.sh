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
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$work/serve.log" ] && cat "$work/serve.log" >&2; exit 1; }

"$dsv4" make-model --preset tiny --seed 1 --out "$work/tiny" >/dev/null
"$dsv4" serve --model "$work/tiny" --served-model-name tiny --port 0 --api-key sekrit --max-model-len 256 \
  --threads 2 "$@" 2>"$work/serve.log" &
server_pid=$!
port=""
for _ in $(seq 1 300); do  # up to 60 s for the port, then the model
  port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$work/serve.log")
  [ -n "$port" ] && grep -q "serve: ready" "$work/serve.log" && break
  kill -0 "$server_pid" 2>/dev/null || fail "the server exited"
  sleep 0.2
done
[ -n "$port" ] && grep -q "serve: ready" "$work/serve.log" || fail "the server did not get ready"
timeout 600 "$python" "$client" "http://127.0.0.1:$port" sekrit tiny || fail "the client checks"
kill -TERM "$server_pid"
for _ in $(seq 1 150); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
kill -0 "$server_pid" 2>/dev/null && fail "SIGTERM did not stop the server within 30 s"
wait "$server_pid" || fail "the server exited with status $?"
server_pid=""
grep -q "serve: stopped" "$work/serve.log" || fail "no drain message"
echo "ok"
