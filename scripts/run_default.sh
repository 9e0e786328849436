#!/usr/bin/env bash
# `make run`: makes the tiny random-weight model in MODEL_DIR unless a complete one is there
# (make-model writes config.json last), then inspects it. Later steps append to this script.
# Usage: scripts/run_default.sh DSV4_BINARY MODEL_DIR
set -euo pipefail
dsv4=$1
model=$2

if [ ! -f "$model/config.json" ]; then
  # --force clears what an interrupted make-model left behind (its own files only).
  "$dsv4" make-model --preset tiny --out "$model" --force
fi
"$dsv4" inspect "$model"
