#!/usr/bin/env bash
# End-to-end check of `dsv4 logits` and `dsv4 generate` on the tiny checkpoint: the .npy has the
# promised header and size, chunked prefill writes the same bytes as one shot, generate prints
# the same ids in both output forms and is deterministic, bad input fails with a message naming it.
# Usage: cli_logits_generate.sh DSV4_BINARY MODEL_DIR
set -euo pipefail
dsv4=$1
model=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

python3 -c "print(','.join(str((i * 7919 + 13) % 129280) for i in range(40)))" >"$work/ids.txt"
"$dsv4" logits --model "$model" --ids "$work/ids.txt" --out "$work/one.npy"
"$dsv4" logits --model "$model" --ids "$work/ids.txt" --out "$work/chunked.npy" --prefill-chunk 7
cmp "$work/one.npy" "$work/chunked.npy" || fail "chunked prefill changed the logits"
python3 - "$work/one.npy" <<'PY'
import ast, math, os, struct, sys
path = sys.argv[1]
with open(path, "rb") as f:
    assert f.read(6) == b"\x93NUMPY", "magic"
    major, minor = f.read(2)
    assert (major, minor) == (1, 0), (major, minor)
    (hlen,) = struct.unpack("<H", f.read(2))
    assert (10 + hlen) % 64 == 0, hlen
    header = ast.literal_eval(f.read(hlen).decode("latin1"))
    assert header == {"descr": "<f4", "fortran_order": False, "shape": (40, 129280)}, header
    data = f.read()
assert len(data) == 40 * 129280 * 4, len(data)
values = struct.unpack("<1000f", data[:4000])
assert all(math.isfinite(v) for v in values) and len(set(values)) > 900
PY

plain=$("$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 6 --ignore-eos)
json=$("$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 6 --ignore-eos --json)
again=$("$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 6 --ignore-eos)
[ "$plain" = "$again" ] || fail "generate is not deterministic: $plain vs $again"
python3 - "$plain" "$json" <<'PY'
import json, sys
plain = [int(x) for x in sys.argv[1].split(",")]
ids = json.loads(sys.argv[2])["ids"]
assert len(ids) == 6 and ids == plain, (ids, plain)
PY

echo "1,x,3" >"$work/bad.txt"
if "$dsv4" logits --model "$model" --ids "$work/bad.txt" --out "$work/bad.npy" 2>"$work/err.txt"; then
  fail "a bad ids file was accepted"
fi
grep -q "bad.txt: entry 1 ('x') is not a token id" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
if "$dsv4" generate --model "$model" --prompt-ids 1,999999 -n 2 2>"$work/err.txt"; then
  fail "an out-of-vocabulary id was accepted"
fi
grep -q "999999" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
# Reported: -n 99999999 ended in "internal error: std::bad_alloc"; it is refused before allocating.
if "$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 99999999 2>"$work/err.txt"; then
  fail "-n 99999999 was accepted"
fi
grep -q -- "--max-new-tokens 99999999 exceed the model's max_position_embeddings" "$work/err.txt" ||
  fail "error message: $(cat "$work/err.txt")"
# The CUDA backend's options parse in every build; a bad value is named.
if "$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 2 --fp8-gemm fast 2>"$work/err.txt"; then
  fail "--fp8-gemm fast was accepted"
fi
grep -q -- "--fp8-gemm: fast not in {mma,wgmma,chained,cublaslt,simple}" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
if "$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 2 --fp4-experts yes 2>"$work/err.txt"; then
  fail "--fp4-experts yes was accepted"
fi
grep -q -- "--fp4-experts: yes not in {auto,on,off}" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
[ "$("$dsv4" generate --model "$model" --prompt-ids 5,6,7 -n 6 --ignore-eos --fp8-gemm cublaslt)" = "$plain" ] ||
  fail "--fp8-gemm changed the CPU backend's ids"
# Text prompts: the streamed text is the decoding of the generated ids, and a text prompt gives
# the same ids as its tokenisation given as --prompt-ids.
if [ -f "$model/tokenizer.json" ]; then
  text_json=$("$dsv4" generate --model "$model" --prompt "Hello, world" -n 5 --ignore-eos --json)
  streamed=$("$dsv4" generate --model "$model" --prompt "Hello, world" -n 5 --ignore-eos)
  prompt_ids=$(echo '{"text": "Hello, world"}' | "$dsv4" tokenize --tokenizer "$model/tokenizer.json" |
               python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["ids"])))')
  by_ids=$("$dsv4" generate --model "$model" --prompt-ids "$prompt_ids" -n 5 --ignore-eos)
  chat_json=$("$dsv4" generate --model "$model" --prompt "Hello" --chat -n 3 --ignore-eos --json)
  python3 - "$text_json" "$streamed" "$by_ids" "$chat_json" <<'PY'
import json, sys
text, streamed, by_ids, chat = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
assert len(text["ids"]) == 5, text
assert streamed.rstrip("\n") == text["text"].rstrip("\n"), (streamed, text["text"])
assert [int(x) for x in by_ids.split(",")] == text["ids"], (by_ids, text["ids"])
assert len(chat["ids"]) == 3 and isinstance(chat["text"], str), chat
PY
  if "$dsv4" generate --model "$model" --prompt-ids 1 --prompt "x" 2>"$work/err.txt"; then
    fail "--prompt-ids and --prompt together were accepted"
  fi
  grep -q "excludes" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"
fi

# Dummy weights: the configuration comes from the folder's config.json or from a preset of the
# same geometry, so both give the same tokens; another seed gives other weights.
from_dir=$("$dsv4" generate --model "$model" --load-format dummy --dummy-seed 3 --prompt-ids 1,2,3 -n 4 --ignore-eos --json)
from_preset=$("$dsv4" generate --model tiny --load-format dummy --dummy-seed 3 --prompt-ids 1,2,3 -n 4 --ignore-eos --json)
other_seed=$("$dsv4" generate --model tiny --load-format dummy --dummy-seed 4 --prompt-ids 1,2,3 -n 4 --ignore-eos --json)
[ "$from_dir" = "$from_preset" ] || fail "dummy weights from config.json ($from_dir) and the preset ($from_preset) differ"
[ "$from_dir" != "$other_seed" ] || fail "--dummy-seed did not change the dummy weights"
if "$dsv4" generate --model no-such-model --load-format dummy --prompt-ids 1 -n 1 2>"$work/err.txt"; then
  fail "an unknown dummy model was accepted"
fi
grep -q "neither a model folder nor a preset" "$work/err.txt" || fail "error message: $(cat "$work/err.txt")"

echo "ok"
