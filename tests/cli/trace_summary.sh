#!/usr/bin/env bash
# scripts/trace_summary.py on a small kernel trace in bench/kernel_trace's CSV form (written here):
# eager kernels counted from their stream's previous kernel's end (programmatic dependent launch),
# overlapping streams splitting the time, idle time, --by-grid, --gaps; graph replays grouped by
# their launch's correlation id, --sequence, --against a base trace; a trace without replays is
# refused with the reason; a summary piped into a reader that stops early ends without a traceback.
set -euo pipefail
script=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# Eager (graph 0), in ns: kA 0-1 ms; kB starts at 0.5 ms on the same stream (counted from 1 ms) to
# 3 ms; kC on stream 2 from 2 to 4 ms (sharing 2-3 ms with kB); idle 4-5 ms; kA again (another
# grid) 5-6 ms. Two replays of a two-kernel graph (correlations 7 and 9), 1 ms each.
cat >"$work/trace.csv" <<'CSV'
start,end,stream,graph,correlation,gx,gy,gz,name
0,1000000,1,0,1,1,1,1,kA
500000,3000000,1,0,2,1,1,1,kB
2000000,4000000,2,0,3,1,1,1,kC
5000000,6000000,1,0,4,2,1,1,kA
10000000,10500000,1,3,7,1,1,1,kG1
10500000,11000000,1,3,7,1,1,1,kG2
12000000,12200000,1,3,9,1,1,1,kG1
12200000,13000000,1,3,9,4,1,1,kG2
CSV
row() { grep -E "^$1 +$2 +$3 +$4%$" "$5" >/dev/null || fail "row $1 $2 $3 $4%: $(cat "$5")"; }

python3 "$script" "$work/trace.csv" --eager --gaps 1 >"$work/eager.txt" || fail "eager run"
grep -q "^eager kernels: 6.000 ms each$" "$work/eager.txt" || fail "eager span: $(cat "$work/eager.txt")"
row kA 2 2.000 33.3 "$work/eager.txt"
row kB 1 1.500 25.0 "$work/eager.txt"
row kC 1 1.500 25.0 "$work/eager.txt"
row "\(idle\)" 0 1.000 16.7 "$work/eager.txt"
grep -q "^1 idle gaps, 1.000 ms in all; the longest:$" "$work/eager.txt" || fail "gaps: $(cat "$work/eager.txt")"
grep -qE "^ +1000\.0  kC +kA$" "$work/eager.txt" || fail "the gap's kernels: $(cat "$work/eager.txt")"

python3 "$script" "$work/trace.csv" --eager --by-grid >"$work/grid.txt" || fail "--by-grid run"
row "kA \(1,1,1\)" 1 1.000 16.7 "$work/grid.txt"
row "kA \(2,1,1\)" 1 1.000 16.7 "$work/grid.txt"

python3 "$script" "$work/trace.csv" --sequence 2 >"$work/graph.txt" || fail "graph run"
grep -q "^2 replays of 2 kernels: 1.000 ms each$" "$work/graph.txt" || fail "replays: $(cat "$work/graph.txt")"
row kG1 1 0.350 35.0 "$work/graph.txt"
row kG2 1 0.650 65.0 "$work/graph.txt"
if grep -q "(idle)" "$work/graph.txt"; then fail "an idle row where no time was idle: $(cat "$work/graph.txt")"; fi
grep -qE "^ +0\.0 +200\.00 +1  kG1 \(1,1,1\)$" "$work/graph.txt" || fail "sequence: $(cat "$work/graph.txt")"
grep -qE "^ +200\.0 +800\.00 +1  kG2 \(4,1,1\)$" "$work/graph.txt" || fail "sequence: $(cat "$work/graph.txt")"
python3 "$script" "$work/trace.csv" --replays 1 >"$work/last.txt" || fail "--replays 1 run"
row kG1 1 0.200 20.0 "$work/last.txt"

# --against: a base trace of the same graph with both kernels longer (kG1 0.5 ms, kG2 1.0 ms a
# replay): each kernel's time in both and the change, the largest change first.
cat >"$work/base.csv" <<'CSV'
start,end,stream,graph,correlation,gx,gy,gz,name
0,500000,1,3,7,1,1,1,kG1
500000,1500000,1,3,7,1,1,1,kG2
2000000,2500000,1,3,9,1,1,1,kG1
2500000,3500000,1,3,9,1,1,1,kG2
CSV
python3 "$script" "$work/trace.csv" --against "$work/base.csv" >"$work/against.txt" || fail "--against run"
grep -qE "^against .*base.csv: 1.500 -> 1.000 ms each \(-0.500\)$" "$work/against.txt" || fail "spans: $(cat "$work/against.txt")"
changes=$(grep -E "^kG[12] +1 +[0-9.]+ +[0-9.]+ +-[0-9.]+$" "$work/against.txt" | awk '{print $1, $3, $4, $5}' | paste -sd';')
[[ "$changes" == "kG2 1.000 0.650 -0.350;kG1 0.500 0.350 -0.150" ]] || fail "the changes: $changes"

grep -v ",3,[79]," "$work/trace.csv" >"$work/eager_only.csv"
if python3 "$script" "$work/eager_only.csv" >/dev/null 2>"$work/err.txt"; then fail "a trace without replays was summarised"; fi
grep -q "no graph replays in the trace" "$work/err.txt" || fail "no-replays reason: $(cat "$work/err.txt")"
# 20,000 kernels of distinct names, all listed (--top), is more than a pipe holds: `head -n 1`
# stops reading while the summary still writes.
python3 - "$work/many.csv" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    f.write("start,end,stream,graph,correlation,gx,gy,gz,name\n")
    for i in range(20000):
        f.write(f"{i * 1000},{i * 1000 + 1000},1,0,{i},1,1,1,kernel_with_a_long_name_{i:05d}\n")
PY
set +o pipefail
python3 "$script" "$work/many.csv" --eager --top 20000 2>"$work/pipe_err.txt" | head -n 1 >/dev/null
set -o pipefail
if [ -s "$work/pipe_err.txt" ]; then fail "piped into head: $(cat "$work/pipe_err.txt")"; fi
echo "trace_summary: ok"
