# Sourced by the e2e scripts: starts `dsv4 serve` with the tiny model on 127.0.0.1 and stops it.
# start_server DSV4 WORK [SERVE_FLAGS...] makes WORK/tiny (once), starts the server on a free port with
# the key "sekrit" and waits until it is ready; it sets server_pid and url. fail names what went
# wrong and shows the server's log. The caller's EXIT trap should call stop_server_now.
server_pid=""
url=""
fail() { echo "FAIL: $*" >&2; [ -f "$work/serve.log" ] && cat "$work/serve.log" >&2; exit 1; }
stop_server_now() { [ -n "$server_pid" ] && kill -9 "$server_pid" 2>/dev/null || true; }

start_server() {
  local dsv4=$1 dir=$2
  shift 2
  [ -d "$dir/tiny" ] || "$dsv4" make-model --preset tiny --seed 1 --out "$dir/tiny" >/dev/null
  "$dsv4" serve --model "$dir/tiny" --served-model-name tiny --port 0 --api-key sekrit --max-model-len 256 \
    --threads 2 "$@" 2>"$dir/serve.log" &
  server_pid=$!
  local port=""
  for _ in $(seq 1 300); do  # up to 60 s for the port, then the model
    # The log may not exist yet (the server's shell has not opened it): no port yet, not an error
    # (under set -e a failed sed here ended the script).
    port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$dir/serve.log" 2>/dev/null || true)
    [ -n "$port" ] && grep -q "serve: ready" "$dir/serve.log" && break
    kill -0 "$server_pid" 2>/dev/null || fail "the server exited"
    sleep 0.2
  done
  [ -n "$port" ] && grep -q "serve: ready" "$dir/serve.log" || fail "the server did not get ready"
  url="http://127.0.0.1:$port"
}

# SIGTERM must drain and stop the server within 30 s, with status 0.
stop_server() {
  kill -TERM "$server_pid"
  for _ in $(seq 1 150); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$server_pid" 2>/dev/null && fail "SIGTERM did not stop the server within 30 s"
  wait "$server_pid" || fail "the server exited with status $?"
  server_pid=""
  grep -q "serve: stopped" "$work/serve.log" || fail "no drain message"
}
