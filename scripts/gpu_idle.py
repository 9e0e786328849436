#!/usr/bin/env python3
"""Where the GPU idles between kernels: reads an `nsys export --type sqlite` file of one run, takes the
window from the first to the last launch of a kernel whose name contains --from / --to (e.g. an 8k
prefill: hc_mix_scan), and prints the window's span, the time some kernel ran (the union of all
streams' kernel intervals), the idle rest, and the largest gaps with the kernels on either side.
Usage: gpu_idle.py FILE.sqlite [--from NAME] [--to NAME] [--top N]"""
import argparse
import sqlite3


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sqlite")
    ap.add_argument("--from", dest="first", default="hc_mix_scan", help="the window opens at this kernel's first launch")
    ap.add_argument("--to", dest="last", default="hc_mix_scan", help="and closes at the end of this one's last launch")
    ap.add_argument("--top", type=int, default=12, help="how many of the largest gaps to list")
    a = ap.parse_args()
    db = sqlite3.connect(a.sqlite)
    rows = db.execute(
        "SELECT k.start, k.end, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON k.shortName = s.id "
        "ORDER BY k.start").fetchall()
    firsts = [r for r in rows if a.first in r[2]]
    lasts = [r for r in rows if a.last in r[2]]
    if not firsts or not lasts:
        raise SystemExit(f"gpu_idle: no kernel named like '{a.first}' / '{a.last}' in {a.sqlite}")
    lo, hi = firsts[0][0], lasts[-1][1]
    window = [r for r in rows if r[0] >= lo and r[1] <= hi]
    busy, gaps, cover_end, prev = 0, [], lo, None
    for start, end, name in window:
        if start > cover_end:
            gaps.append((start - cover_end, prev, name))
        if end > cover_end:
            busy += end - max(start, cover_end)
            cover_end = end
            prev = name
    span = hi - lo
    print(f"window: {len(window)} kernels, span {span / 1e6:.3f} ms, busy {busy / 1e6:.3f} ms, "
          f"idle {(span - busy) / 1e6:.3f} ms in {len(gaps)} gaps")
    for limit in (2_000, 10_000, 100_000):
        big = [g for g in gaps if g[0] >= limit]
        print(f"  gaps >= {limit / 1000:g} us: {len(big)}, {sum(g[0] for g in big) / 1e6:.3f} ms")
    for length, before, after in sorted(gaps, key=lambda g: -g[0])[: a.top]:
        print(f"  {length / 1000:9.1f} us  after {before[:60]}  before {after[:60]}")


if __name__ == "__main__":
    main()
