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
stop_server
echo "ok"
