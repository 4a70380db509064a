"""The selection of `harnessbandit_robust`'s settings from the tuning grid (issue 29 item 2).

    hb grid run ablations/examples/robust_tune.toml --out DIR --jobs 1
    python scripts/robust_tune.py ablations/examples/robust_tune.toml DIR [--json OUT]

The grid is a grid of parts, one per tuning scenario, each with a [tune] table; `hb grid run`
runs every part's tuning cells (designs x tune points x tuning seeds; into DIR/tune/ once a
grid of parts runs tuned parts in two phases, then also each part at its own selection on the
test seeds, which this script does not read). Per part, the [tune]
machinery's own rule scores every point (`ablations.tune.select`: the mean over tuning seeds
of the mean validation reward at the final step). Across parts, this script then picks the
one point of the `robust` design with the largest

    mean over tuning scenarios s of  g(point, s) / max over points |g(., s)|,
    g(point, s) = score(point, s) - score(uniform, s),

so every scenario weighs the same whatever its reward scale (ties: the point listed first).
It prints every point's criterion and per-scenario gains, and the chosen setting.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ablations.spec import load_spec
from ablations.tune import select
from hbsim.contract import PART
from hbsim.records import canonical_json

DESIGN, BASELINE = "robust", "uniform"


def criterion(spec, root: Path) -> tuple[list[dict], list[str]]:
    """(one row per point of the robust design: setting, per-part gains, criterion; part names)."""
    gains: dict[str, dict] = {}
    names = []
    # where `hb grid run` put the tuning cells: DIR/tune/ where a grid of parts runs its tuned
    # parts in two phases (issue 28's ablations.tune.is_tuned), else DIR itself
    tune_dir = root / "tune" if (root / "tune" / "grid.json").is_file() else root
    for part in spec.parts:
        name = part.name.split("/", 1)[1]
        names.append(name)
        chosen = select(part, tune_dir)["designs"]
        base = chosen[BASELINE]["score"]
        for row in chosen[DESIGN]["points"]:
            setting = {k: v for k, v in row["setting"].items() if k != PART}      # the part's own sweep key
            entry = gains.setdefault(canonical_json(setting), {"setting": setting, "gains": {}})
            entry["gains"][name] = row["score"] - base
    scale = {n: max(abs(e["gains"][n]) for e in gains.values()) or 1.0 for n in names}
    rows = []
    for e in gains.values():
        e["criterion"] = float(np.mean([e["gains"][n] / scale[n] for n in names]))
        e["below_uniform"] = sum(e["gains"][n] < 0 for n in names)
        rows.append(e)
    return rows, names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("grid")
    parser.add_argument("dir")
    parser.add_argument("--json", default=None, help="also write the table and the selection here")
    args = parser.parse_args(argv)
    spec = load_spec(args.grid)
    rows, names = criterion(spec, Path(args.dir))
    best = max(range(len(rows)), key=lambda j: (rows[j]["criterion"], -j))
    width = max(len(canonical_json(r["setting"])) for r in rows)
    print(f"{'setting':<{width}}  criterion  below uniform  " + "  ".join(f"{n:>12}" for n in names))
    for j in sorted(range(len(rows)), key=lambda j: -rows[j]["criterion"]):
        r = rows[j]
        print(f"{canonical_json(r['setting']):<{width}}  {r['criterion']:+9.3f}  {r['below_uniform']:>13}  "
              + "  ".join(f"{r['gains'][n]:+12.4f}" for n in names))
    print(f"selected: {canonical_json(rows[best]['setting'])} (criterion {rows[best]['criterion']:+.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"scenarios": names, "points": rows, "selected": rows[best]},
                                              indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
