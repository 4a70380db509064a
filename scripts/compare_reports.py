"""Compare two `hb report` folders (or two captures of scripts/capture_numbers.sh): every
CSV cell, every parquet table, report.md, index.html, the export and the captured stdout.

    python scripts/compare_reports.py BEFORE AFTER [--rtol 1e-9] [--skip '*.err'] [--ignore-columns 'seconds_.*']

A CSV is "identical" when its text is; "equal" when every number agrees within rtol
(relative to the larger magnitude, absolute 1e-15 near zero) and every other cell is the
same string; a parquet table is "equal" when its frame equals (pandas, exact) although its
bytes differ (`--ignore-columns REGEX`: columns left out of both, e.g. the measured seconds of a
rerun). The other text files must be identical; PNGs and .npz are compared by bytes.
Prints one line per file that is not identical and the largest relative difference seen;
exits 1 when a file is missing or differs beyond rtol.
"""
from __future__ import annotations

import argparse
import fnmatch
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def compare_csv(a: Path, b: Path, rtol: float) -> tuple[str, float]:
    if a.read_bytes() == b.read_bytes():
        return "identical", 0.0
    x, y = pd.read_csv(a, keep_default_na=False), pd.read_csv(b, keep_default_na=False)
    if list(x.columns) != list(y.columns) or x.shape != y.shape:
        return f"shape/columns differ {x.shape} vs {y.shape}", np.inf
    worst = 0.0
    for col in x.columns:
        u, v = pd.to_numeric(x[col], errors="coerce"), pd.to_numeric(y[col], errors="coerce")
        num = u.notna() & v.notna()
        if not (x[col].astype(str)[~num] == y[col].astype(str)[~num]).all():
            return f"column {col}: a non-numeric cell differs", np.inf
        du, dv = u[num].to_numpy(float), v[num].to_numpy(float)
        both_inf = np.isinf(du) & np.isinf(dv) & (np.sign(du) == np.sign(dv))
        scale = np.maximum(np.maximum(np.abs(du), np.abs(dv)), 1e-15)
        rel = np.where(both_inf, 0.0, np.abs(du - dv) / scale)
        worst = max(worst, float(rel.max(initial=0.0)))
    return ("equal" if worst <= rtol else "DIFFERS"), worst


def compare_parquet(a: Path, b: Path, ignore: str | None = None) -> str:
    if a.read_bytes() == b.read_bytes():
        return "identical"
    x, y = pd.read_parquet(a), pd.read_parquet(b)
    if ignore:
        x, y = (f[[c for c in f.columns if not re.fullmatch(ignore, str(c))]] for f in (x, y))
    try:
        pd.testing.assert_frame_equal(x, y, check_exact=True)
    except AssertionError:
        return "DIFFERS"
    return "equal"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--rtol", type=float, default=1e-9)
    ap.add_argument("--skip", action="append", default=[], help="glob of relative paths not compared (repeatable)")
    ap.add_argument("--ignore-columns", default=None, help="regex of parquet columns not compared (e.g. 'seconds_.*')")
    args = ap.parse_args(argv)
    names = sorted({p.relative_to(args.before) for p in args.before.rglob("*") if p.is_file()
                    and not p.name.startswith(".")
                    and not any(fnmatch.fnmatch(p.relative_to(args.before).as_posix(), g) for g in args.skip)})
    bad, worst, counts = 0, 0.0, {}
    for rel in names:
        a, b = args.before / rel, args.after / rel
        if not b.exists():
            print(f"MISSING {rel}")
            bad += 1
            continue
        if rel.suffix == ".csv":
            state, w = compare_csv(a, b, args.rtol)
            worst = max(worst, w)
        elif rel.suffix == ".parquet":
            state = compare_parquet(a, b, args.ignore_columns)
        else:
            state = "identical" if a.read_bytes() == b.read_bytes() else "DIFFERS"
        counts[state.split()[0]] = counts.get(state.split()[0], 0) + 1
        if state != "identical":
            print(f"{state:9s} {rel}" + (f"  (max rel {w:.2e})" if rel.suffix == ".csv" else ""))
        bad += state not in ("identical", "equal")
    print(f"{len(names)} files: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
          + f"; largest relative difference {worst:.2e} (rtol {args.rtol:g})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
