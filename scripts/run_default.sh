#!/usr/bin/env bash
# `make run`: makes the tiny random-weight model in MODEL_DIR unless a complete one is there
# (make-model writes config.json last), inspects it, then generates from a text prompt through
# the DeepSeek-V4 chat encoding on the CPU reference (and on the GPU where one is usable). The
# weights are random, so the text is noise: the run shows the whole path works.
# Usage: scripts/run_default.sh DSV4_BINARY MODEL_DIR
set -euo pipefail
dsv4=$1
model=$2

if [ ! -f "$model/config.json" ]; then
  # --force clears what an interrupted make-model left behind (its own files only).
  "$dsv4" make-model --preset tiny --out "$model" --force
fi
"$dsv4" inspect "$model"
prompt="What is the capital of France?"
echo
echo "== generate (cpu): $prompt"
"$dsv4" generate --model "$model" --prompt "$prompt" --chat -n 24 --ignore-eos --stats
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi >/dev/null 2>&1; then
  echo "== generate (cuda): $prompt"
  "$dsv4" generate --model "$model" --prompt "$prompt" --chat -n 24 --ignore-eos --stats --device cuda
fi
