#!/usr/bin/env bash
# End-to-end check of `dsv4 make-model` and `dsv4 inspect`: the tiny preset is written, complete
# and deterministic for a seed; inspect reports it (text and JSON), reports a real config, and
# fails naming the missing tensors when a shard is gone; full-size presets are refused when the
# disk is too small.
# Usage: make_model_inspect.sh DSV4_BINARY SHARED_DIR
set -euo pipefail
dsv4=$1
shared=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }

# A stand-in tokenizer folder, to check make-model copies both files.
mkdir "$work/tok"
echo '{"model": "stand-in"}' >"$work/tok/tokenizer.json"
echo '{"bos_token": "x"}' >"$work/tok/tokenizer_config.json"

"$dsv4" make-model --preset tiny --out "$work/a" --seed 1 --tokenizer "$work/tok"
cmp "$work/tok/tokenizer.json" "$work/a/tokenizer.json" || fail "tokenizer.json not copied"
cmp "$work/tok/tokenizer_config.json" "$work/a/tokenizer_config.json" || fail "tokenizer_config.json not copied"
ls "$work/a"/*.partial 2>/dev/null && fail "partial files left behind"

"$dsv4" inspect "$work/a" >"$work/inspect.txt" || fail "inspect failed on a fresh tiny model"
grep -q "layer kinds (s = swa, c = csa, h = hca): schc | mtp: s" "$work/inspect.txt" || fail "layer kinds line"
grep -q "missing 0, wrong shape or dtype 0" "$work/inspect.txt" || fail "tensor check line"

"$dsv4" inspect --json "$work/a" >"$work/a.json"
python3 - "$work/a.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["num_hidden_layers"] == 4, j["num_hidden_layers"]
assert j["layer_kinds"] == ["swa", "csa", "hca", "csa"], j["layer_kinds"]
assert j["mtp_layers"] == 1 and j["mtp_layer_kinds"] == ["swa"], j["mtp_layers"]
assert j["tensor_count"] == j["expected_tensor_count"] > 400, j["tensor_count"]
assert j["missing"] == [] and j["wrong"] == [] and j["unexpected"] == []
assert j["files"] >= 3, j["files"]  # tiny spans several shards
assert j["bytes"] == j["expected_bytes"]
PY

# A lone real config.json.
"$dsv4" inspect --json "$shared/data/configs/deepseek-v4-pro.config.json" >"$work/pro.json"
python3 - "$work/pro.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
assert j["num_hidden_layers"] == 61
assert j["layer_kinds"][:4] == ["hca", "hca", "csa", "hca"] and j["layer_kinds"][-1] == "csa"
assert j["layer_kinds"].count("csa") == 30 and j["layer_kinds"].count("hca") == 31
assert j["mtp_layers"] == 1 and j["mtp_layer_kinds"] == ["swa"]
assert j["expected_tensor_count"] == 145116
assert "tensor_count" not in j and "missing" not in j
PY

# A non-empty folder is refused without --force.
if "$dsv4" make-model --preset tiny --out "$work/a" 2>"$work/err.txt"; then fail "overwrote without --force"; fi
grep -q -- "--force" "$work/err.txt" || fail "refusal does not mention --force"

# Same seed: identical files (also after --force over an earlier model); other seed: other weights.
"$dsv4" make-model --preset tiny --out "$work/b" --seed 1 --tokenizer "$work/tok"
"$dsv4" make-model --preset tiny --out "$work/a" --seed 1 --tokenizer "$work/tok" --force
for f in "$work/a"/*; do cmp "$f" "$work/b/$(basename "$f")" || fail "seed 1 differs in $(basename "$f")"; done
[ "$(ls "$work/a" | wc -l)" -eq "$(ls "$work/b" | wc -l)" ] || fail "different file sets"
rm -rf "$work/a"
"$dsv4" make-model --preset tiny --out "$work/c" --seed 2 --tokenizer "$work/tok"
for f in "$work/c"/model-*.safetensors; do
  if cmp -s "$f" "$work/b/$(basename "$f")"; then fail "seed 2 equals seed 1 in $(basename "$f")"; fi
done
rm -rf "$work/c"

# A shard deleted together with its index entries: inspect fails and lists exactly its tensors.
shard=model-00003-of-00004.safetensors
python3 - "$work/b" "$shard" "$work/lost.txt" <<'PY'
import json, os, sys
folder, shard, lost = sys.argv[1:]
path = os.path.join(folder, "model.safetensors.index.json")
index = json.load(open(path))
gone = sorted(n for n, s in index["weight_map"].items() if s == shard)
assert gone, "no tensors in " + shard
index["weight_map"] = {n: s for n, s in index["weight_map"].items() if s != shard}
json.dump(index, open(path, "w"))
os.remove(os.path.join(folder, shard))
open(lost, "w").write("\n".join(gone))
PY
if "$dsv4" inspect "$work/b" >"$work/inspect.txt" 2>"$work/err.txt"; then fail "inspect passed with a shard gone"; fi
grep -q "expected tensors missing" "$work/err.txt" || fail "no missing-tensor error: $(cat "$work/err.txt")"
grep -q "^missing (" "$work/inspect.txt" || fail "missing tensors not listed"
if "$dsv4" inspect --json "$work/b" >"$work/b.json" 2>/dev/null; then fail "inspect --json passed with a shard gone"; fi
python3 - "$work/b.json" "$work/lost.txt" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
lost = open(sys.argv[2]).read().split("\n")
assert sorted(j["missing"]) == lost, (len(j["missing"]), len(lost))
assert j["tensor_count"] == j["expected_tensor_count"] - len(lost)
PY

# A shard file deleted while the index still lists it: inspect fails naming the file.
rm "$work/b/model-00002-of-00004.safetensors"
if "$dsv4" inspect "$work/b" >/dev/null 2>"$work/err.txt"; then fail "inspect passed with a listed shard gone"; fi
grep -q "model-00002-of-00004.safetensors" "$work/err.txt" || fail "error does not name the shard"

# Full-size presets are refused, before writing anything, when the disk cannot hold them
# (Pro needs ~865 GB; skipped on a disk that large).
if python3 -c "import shutil, sys; sys.exit(0 if shutil.disk_usage('$work').free < 870e9 else 1)"; then
  if "$dsv4" make-model --preset pro --out "$work/pro" 2>"$work/err.txt"; then fail "pro was not refused"; fi
  grep -q "not enough disk space" "$work/err.txt" || fail "pro refusal: $(cat "$work/err.txt")"
  [ ! -e "$work/pro" ] || fail "pro refusal left a folder behind"
else
  echo "note: the disk can hold V4-Pro; the refusal check is skipped"
fi
echo "make-model / inspect: all checks passed"
