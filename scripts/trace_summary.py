#!/usr/bin/env python3
"""Summarise a kernel trace (bench/kernel_trace: CSV of start, end, stream, graph, correlation,
grid, name): where the time of a decode step's CUDA graph goes, or of the eager kernels (prefill).

A graph replay is the set of kernels sharing the correlation id of one cudaGraphLaunch; the last
--replays replays of the largest graph are summarised. With programmatic dependent launch a kernel
starts while the kernel before it on its stream still runs and waits for it, so each kernel is
counted from that kernel's end. At each instant the time is split evenly among the kernels running
(side streams overlap), so the shares add up to the replay's span.

--sequence N lists the first N kernels of the last summarised replay in start order, each with its
stream, grid and time (from its stream's previous kernel's end), to read one layer's chain.

--gaps N lists the N longest idle gaps of the summarised kernels (no kernel running), each with
the kernels that end before it and start after it, to tell host waits from launch overhead.

--against BASE.csv summarises BASE the same way and lists each kernel's time in both and the
change, largest changes first (two builds' traces of the same step: which kernels a change moved).

Usage: trace_summary.py TRACE.csv[.gz] [--replays N] [--by-grid] [--eager] [--top N] [--gaps N] [--sequence N]
                        [--against BASE.csv[.gz]]
"""
import argparse
import collections
import csv
import gzip
import signal


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return list(csv.DictReader(f))


def effective(kernels):
    """(start, end, key) per kernel, each counted from its stream's previous kernel's end."""
    prev_end = {}
    out = []
    for r in sorted(kernels, key=lambda r: int(r["start"])):
        start, end = int(r["start"]), int(r["end"])
        start = max(start, prev_end.get(r["stream"], 0))
        prev_end[r["stream"]] = max(end, prev_end.get(r["stream"], 0))
        out.append((start, max(start, end), r))
    return out


def shares(intervals, key):
    """Each key's share of the span (ns), splitting time among the kernels running at once."""
    events = []
    for start, end, r in intervals:
        events += [(start, 1, key(r)), (end, -1, key(r))]
    events.sort(key=lambda e: (e[0], e[1]))
    share = collections.defaultdict(float)
    active = collections.Counter()
    t0 = events[0][0]
    for t, d, k in events:
        running = sum(active.values())
        if running:
            for a, c in active.items():
                share[a] += (t - t0) * c / running
        elif t > t0:
            share["(idle)"] += t - t0
        active[k] += d
        if active[k] == 0:
            del active[k]
        t0 = t
    return share, events[-1][0] - events[0][0]


def gaps(intervals):
    """(length ns, kernel before, kernel after) of each stretch in which no kernel runs."""
    out = []
    busy_until, last = None, None
    for start, end, r in sorted(intervals, key=lambda i: i[0]):
        if busy_until is not None and start > busy_until:
            out.append((start - busy_until, last["name"], r["name"]))
        if busy_until is None or end >= busy_until:
            busy_until, last = end, r
    return out


def summary_groups(rows, eager, replays):
    """The kernel sets to summarise: the eager kernels, or the last `replays` replays of the largest graph."""
    if eager:
        return [[r for r in rows if r["graph"] == "0"]]
    by_launch = collections.defaultdict(list)
    for r in rows:
        if r["graph"] != "0":
            by_launch[int(r["correlation"])].append(r)
    if not by_launch:
        raise SystemExit("no graph replays in the trace")
    biggest = max(len(v) for v in by_launch.values())
    return [by_launch[c] for c in sorted(by_launch) if len(by_launch[c]) == biggest][-replays:]


def summarise(groups, key):
    """(span ns, {key: ns}, {key: calls}, idle gaps) per group, averaged over the groups (gaps: all)."""
    total = collections.defaultdict(float)
    calls = collections.Counter()
    span = 0
    idle = []
    for g in groups:
        intervals = effective(g)
        idle += gaps(intervals)
        s, sp = shares(intervals, key)
        span += sp
        for k, v in s.items():
            total[k] += v
        for _, _, r in intervals:
            calls[key(r)] += 1
    n = len(groups)
    return span / n, {k: v / n for k, v in total.items()}, {k: c / n for k, c in calls.items()}, idle


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--replays", type=int, default=5, help="graph replays to average (the last ones)")
    ap.add_argument("--by-grid", action="store_true", help="one row per kernel and grid size")
    ap.add_argument("--eager", action="store_true", help="the kernels outside graphs (e.g. a prefill)")
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--gaps", type=int, default=0, help="list the N longest idle gaps")
    ap.add_argument("--sequence", type=int, default=0, help="list the first N kernels of the last replay")
    ap.add_argument("--against", help="a base trace: each kernel's time in both and the change")
    args = ap.parse_args()
    key = (lambda r: f"{r['name']} ({r['gx']},{r['gy']},{r['gz']})") if args.by_grid else (lambda r: r["name"])
    groups = summary_groups(read(args.trace), args.eager, args.replays)
    span, total, calls, idle = summarise(groups, key)
    n = len(groups)
    what = "eager kernels" if args.eager else f"{n} replays of {len(groups[0])} kernels"
    print(f"{what}: {span / 1e6:.3f} ms each")
    print(f"{'kernel':64s} {'calls':>6s} {'ms':>8s} {'share':>6s}")
    for k, v in sorted(total.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{k[:64]:64s} {calls.get(k, 0):6.0f} {v / 1e6:8.3f} {v / span * 100:5.1f}%")
    if args.against:
        base_span, base_total, base_calls, _ = summarise(
            summary_groups(read(args.against), args.eager, args.replays), key)
        print(f"\nagainst {args.against}: {base_span / 1e6:.3f} -> {span / 1e6:.3f} ms each "
              f"({(span - base_span) / 1e6:+.3f})")
        print(f"{'kernel':64s} {'calls':>6s} {'base ms':>8s} {'ms':>8s} {'change':>8s}")
        kernels = set(total) | set(base_total)
        changes = sorted(kernels, key=lambda k: -abs(total.get(k, 0) - base_total.get(k, 0)))
        for k in changes[: args.top]:
            was, now = base_total.get(k, 0) / 1e6, total.get(k, 0) / 1e6
            print(f"{k[:64]:64s} {calls.get(k, base_calls.get(k, 0)):6.0f} {was:8.3f} {now:8.3f} {now - was:+8.3f}")
    if args.gaps:
        print(f"\n{len(idle) / n:.0f} idle gaps, {sum(g[0] for g in idle) / n / 1e6:.3f} ms in all; the longest:")
        print(f"{'gap us':>9s}  {'kernel before':40s}  kernel after")
        for length, before, after in sorted(idle, key=lambda g: -g[0])[: args.gaps]:
            print(f"{length / 1e3:9.1f}  {before[:40]:40s}  {after[:40]}")
    if args.sequence:
        intervals = effective(groups[-1])
        t0 = intervals[0][0]
        print(f"\nthe first {args.sequence} kernels of the last replay:")
        print(f"{'start us':>9s} {'us':>7s} {'stream':>6s}  kernel (grid)")
        for start, end, r in intervals[: args.sequence]:
            grid = f"({r['gx']},{r['gy']},{r['gz']})"
            print(f"{(start - t0) / 1e3:9.1f} {(end - start) / 1e3:7.2f} {r['stream']:>6s}  {r['name'][:60]} {grid}")


if __name__ == "__main__":
    # Piped into head, the summary stops quietly where the reader stops reading.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
