"""The transfer matrix of fixed-arm real runs: training on harness A alone, the change of
held-out success on every harness B (the held-out harness included), with intervals.

    python -m reports.transfer runs/lm-grid [--from 0] [--to 30] [--csv OUT.csv]

Reads every finished run of a grid folder (DIR/cells/<id>/) or a folder of run folders whose
policy is `fixed` (label `fixed-<harness>`), and for each trained harness A and evaluated
harness B: the mean over (seed, held-out task, attempt) of success at step `--to` minus
success at step `--from` (the same tasks at both steps, so the differences are paired), its
95% Student-t interval over those paired differences (`reports.readings.intervals.mean_half_width`;
tasks and seeds pooled as the unit, so between-seed variance enters only through them), the
success at `--from` and `--to`, and the seeds. Prints a markdown table (rows: trained
harness; columns: evaluated harness, "change [low, high]") and writes the long table as CSV
with `--csv`. Runs that have not reached `--to` are left out and counted.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract import CELLS, EVAL_FILE
from hbsim.contract.records import read_meta
from reports.readings.intervals import mean_half_width
from policies.errors import UserError


def fixed_runs(root: Path) -> list[tuple[str, int, Path]]:
    """(trained harness, seed, run folder) of every finished fixed-arm run under `root`."""
    folders = sorted((root / CELLS).glob("*")) if (root / CELLS).is_dir() else sorted(root.glob("*"))
    out = []
    for folder in folders:
        meta = read_meta(folder) if (folder / EVAL_FILE).is_file() else None
        if meta is None:
            continue
        policy = (meta.get("config") or {}).get("policy") or {}
        if policy.get("name") != "fixed":
            continue
        label = str(meta.get("label") or policy.get("label") or "")
        out.append((label.removeprefix("fixed-"), int(meta["seed"]), folder))
    return out


def transfer_table(root, start: int = 0, end: int = 30, level: float = 0.95) -> tuple[pd.DataFrame, int]:
    """(long table: trained, evaluated, seeds, n, before, after, change, low, high; the number of
    fixed-arm runs left out because they did not reach step `end`)."""
    rows, skipped = [], 0
    parts: dict[tuple[str, str], list[np.ndarray]] = {}
    levels: dict[tuple[str, str], list[tuple[float, float]]] = {}
    seeds: dict[str, set] = {}
    for trained, seed, folder in fixed_runs(Path(root)):
        ev = pd.read_parquet(folder / EVAL_FILE)
        if end not in set(ev["step"]) or start not in set(ev["step"]):
            skipped += 1
            continue
        seeds.setdefault(trained, set()).add(seed)
        key = ["suite", "task", "harness", "attempt"]
        a = ev[ev["step"] == start].set_index(key)["success"].astype(float)
        b = ev[ev["step"] == end].set_index(key)["success"].astype(float)
        both = a.index.intersection(b.index)
        diff = (b.loc[both] - a.loc[both])
        for harness, d in diff.groupby(level="harness", sort=False):
            parts.setdefault((trained, harness), []).append(d.to_numpy())
            levels.setdefault((trained, harness), []).append((float(a.loc[both].xs(harness, level="harness").mean()),
                                                              float(b.loc[both].xs(harness, level="harness").mean())))
    for (trained, harness), ds in parts.items():
        d = np.concatenate(ds)
        mean, half = mean_half_width(d, level) if len(d) > 1 else (float(d.mean()), float("nan"))
        before = float(np.mean([x for x, _ in levels[(trained, harness)]]))
        after = float(np.mean([y for _, y in levels[(trained, harness)]]))
        rows.append({"trained": trained, "evaluated": harness, "seeds": ",".join(map(str, sorted(seeds[trained]))),
                     "n": len(d), "before": before, "after": after, "change": mean, "low": mean - half,
                     "high": mean + half})
    return pd.DataFrame(rows, columns=["trained", "evaluated", "seeds", "n", "before", "after", "change", "low",
                                       "high"]), skipped


def markdown(table: pd.DataFrame, order: list[str] | None = None) -> str:
    """Rows: trained harness (with its seeds); columns: evaluated harness, `change [low, high]`."""
    if table.empty:
        return "(no fixed-arm run has reached both steps yet)"
    evaluated = order or list(dict.fromkeys(table["evaluated"]))     # the eval frame's order: training, held out
    trained = [h for h in evaluated if h in set(table["trained"])]
    lines = ["| trained \\ evaluated | " + " | ".join(evaluated) + " |", "|---" * (len(evaluated) + 1) + "|"]
    for t in trained:
        part = table[table["trained"] == t].set_index("evaluated")
        cells = [f"{part.loc[e, 'change']:+.2f} [{part.loc[e, 'low']:+.2f}, {part.loc[e, 'high']:+.2f}]"
                 if e in part.index else "" for e in evaluated]
        lines.append(f"| {t} (seeds {part['seeds'].iloc[0]}) | " + " | ".join(cells) + " |")
    lines.append("| success at the first step, mean of the runs | " + " | ".join(
        f"{table[table['evaluated'] == e]['before'].mean():.2f}" for e in evaluated) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.transfer", description=__doc__.splitlines()[0])
    parser.add_argument("dir")
    parser.add_argument("--from", dest="start", type=int, default=0)
    parser.add_argument("--to", dest="end", type=int, default=30)
    parser.add_argument("--csv", default=None, help="also write the long table here (a new .csv file)")
    args = parser.parse_args(argv)
    try:
        root = Path(args.dir)
        if not root.is_dir():
            raise UserError(f"DIR {args.dir!r} is not a folder: expected a grid or a folder of run folders")
        if args.csv and (Path(args.csv).exists() or not args.csv.endswith(".csv")):
            raise UserError(f"--csv {args.csv!r} is not allowed: expected a new file name ending in .csv")
        table, skipped = transfer_table(root, args.start, args.end)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(markdown(table))
    print(f"\nchange of success from step {args.start} to step {args.end}, 95% t-interval over paired (seed, task, "
          f"attempt) differences; {skipped} fixed-arm run(s) had not reached both steps")
    if args.csv:
        table.to_csv(args.csv, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
