#!/usr/bin/env python3
"""Where a kernel's time goes by code region, from Nsight Compute's SASS source page: the CSV of
`ncu -i REPORT.ncu-rep --page source --csv --print-source sass` (plain or gzipped), profiled with
`--section SourceCounters` (and WarpStateStats for the stall reasons).

A kernel's phases are separated by barriers, so the SASS is cut into regions after each barrier
instruction (BAR.SYNC / BAR.ARV, WARPGROUP.DEPBAR, SYNCS waits, EXIT) and after each match of
--split-at. Per region it prints its share of the warp stall samples (where warps spent their
time), its executed warp instructions, the counts of the instructions that say what it does
(MMAs, copies, loads, stores, shuffles, exponentials) and its two largest stall reasons. Then the
opcodes by executed instructions and the hottest instructions, each with its stall reasons.

Usage: ncu_sass_regions.py SOURCE.csv[.gz] [--min-share PCT] [--ops N] [--top N] [--split-at REGEX]
"""
import argparse
import collections
import csv
import gzip
import re
import sys

BARRIER = re.compile(r"^(BAR\.(SYNC|ARV|RED)|WARPGROUP\.DEPBAR|SYNCS\.|EXIT|WARPSYNC)")
# Opcode families that tell what a region does, in the order they are printed.
FAMILIES = [("MMA", re.compile(r"^(HGMMA|HMMA|IMMA|QGMMA)")), ("cp.async", re.compile(r"^LDGSTS")),
            ("TMA", re.compile(r"^UTMA")), ("LDG", re.compile(r"^LDG")), ("STG", re.compile(r"^STG")),
            ("LDS", re.compile(r"^(LDS|LDSM)")), ("STS", re.compile(r"^STS")), ("SHFL", re.compile(r"^SHFL")),
            ("MUFU", re.compile(r"^MUFU"))]


def read_rows(path):
    """The page's instruction rows as dicts (the header row is the one that starts with Address)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        reader = csv.reader(f)
        header = None
        for row in reader:
            if row and row[0] == "Address":
                header = row
                break
        if header is None:
            sys.exit(f"ncu_sass_regions: {path}: no header row starting with \"Address\" (is it the SASS source page?)")
        for column in ("Source", "Instructions Executed", "Warp Stall Sampling (All Samples)"):
            if column not in header:
                sys.exit(f"ncu_sass_regions: {path}: no column \"{column}\" (profile with --section SourceCounters)")
        return [dict(zip(header, row)) for row in reader if len(row) == len(header)]


def number(text):
    try:
        return int(float(text.replace(",", "")))
    except ValueError:
        return 0


def opcode(source):
    """The instruction's opcode (its predicate dropped), e.g. HGMMA.64x256x16.F32.BF16."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0] if words else ""


def family_of(op):
    """The first of FAMILIES the opcode belongs to (LDGSTS is a copy, not a load), or None."""
    for name, pattern in FAMILIES:
        if pattern.match(op):
            return name
    return None


def stall_reasons(rows, stall_columns):
    totals = collections.Counter()
    for r in rows:
        for c in stall_columns:
            totals[c[len("stall_"):]] += number(r.get(c, "0"))
    return totals


def describe_stalls(counter, samples, most=2):
    if samples == 0:
        return "-"
    return ", ".join(f"{name} {100.0 * n / samples:.0f}%" for name, n in counter.most_common(most) if n > 0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source")
    parser.add_argument("--min-share", type=float, default=0.5, help="regions below this %% of samples are left out")
    parser.add_argument("--ops", type=int, default=12, help="opcodes listed")
    parser.add_argument("--top", type=int, default=12, help="hottest instructions listed")
    parser.add_argument("--split-at", default=None, help="also cut after instructions matching this regex")
    args = parser.parse_args()

    rows = read_rows(args.source)
    split_at = re.compile(args.split_at) if args.split_at else None
    stall_columns = [c for c in (rows[0].keys() if rows else [])
                     if c.startswith("stall_") and not c.endswith("(Not Issued)")]
    executed = [number(r["Instructions Executed"]) for r in rows]
    samples = [number(r["Warp Stall Sampling (All Samples)"]) for r in rows]
    total_executed, total_samples = sum(executed), sum(samples)
    print(f"{len(rows)} SASS instructions, {total_executed:,} warp instructions executed, "
          f"{total_samples:,} stall samples")
    if total_samples == 0:
        sys.exit("ncu_sass_regions: no stall samples (profile with --section SourceCounters)")

    # Regions: from one barrier (exclusive) to the next (inclusive).
    print("\nregions (cut after barriers; share of stall samples, cumulative, warp instructions):")
    print(f"  {'lines':>11} {'share':>6} {'cum':>6} {'instr':>13}  what it does / its largest stalls")
    begin, cumulative = 0, 0
    for i, r in enumerate(rows):
        op = opcode(r["Source"])
        last = i == len(rows) - 1
        if not (BARRIER.match(op) or (split_at and split_at.search(r["Source"])) or last):
            continue
        region = rows[begin:i + 1]
        region_samples = sum(samples[begin:i + 1])
        cumulative += region_samples
        share = 100.0 * region_samples / total_samples
        if share >= args.min_share:
            families = collections.Counter()
            for x, n in zip(region, executed[begin:i + 1]):
                name = family_of(opcode(x["Source"]))
                if name and n > 0:
                    families[name] += 1
            what = " ".join(f"{name} x{families[name]}" for name, _ in FAMILIES if families[name])
            stalls = describe_stalls(stall_reasons(region, stall_columns), region_samples)
            print(f"  {begin:>5}-{i:<5} {share:5.1f}% {100.0 * cumulative / total_samples:5.1f}% "
                  f"{sum(executed[begin:i + 1]):>13,}  ends {op}; {what or '-'}; {stalls}")
        begin = i + 1

    print(f"\nopcodes by warp instructions executed (share of instructions, of stall samples):")
    by_instr, by_samples = collections.Counter(), collections.Counter()
    for r, n, s in zip(rows, executed, samples):
        family = opcode(r["Source"]).split(".")[0]
        by_instr[family] += n
        by_samples[family] += s
    for family, n in by_instr.most_common(args.ops):
        print(f"  {family:<12} {100.0 * n / max(total_executed, 1):5.1f}%  {100.0 * by_samples[family] / total_samples:5.1f}%")

    print(f"\nhottest instructions (line, share of stall samples, executed, largest stalls):")
    for i in sorted(range(len(rows)), key=lambda k: -samples[k])[:args.top]:
        stalls = describe_stalls(stall_reasons([rows[i]], stall_columns), samples[i])
        print(f"  {i:>5} {100.0 * samples[i] / total_samples:5.1f}% {executed[i]:>10,}  "
              f"{rows[i]['Source'].strip()[:64]}  [{stalls}]")


if __name__ == "__main__":
    main()
