"""The selection of `harnessbandit_robust`'s settings from the tuning grid (issue 29 item 2).

    hb grid run ablations/examples/robust_tune.toml --out DIR --jobs 1
    python scripts/robust_tune.py ablations/examples/robust_tune.toml DIR [--json OUT]

The grid is a grid of parts, one per tuning scenario, each with a [tune] table; `hb grid run`
runs every part's tuning cells (designs x tune points x tuning seeds; into DIR/tune/ once a
grid of parts runs tuned parts in two phases, then also each part at its own selection on the
test seeds, which this script does not read). Every point of the `robust` design is scored
per part in two readings, as the issue's claim is made at equal steps and at equal groups:

* equal steps: the [tune] machinery's own rule (`ablations.tune.select`: the mean over
  tuning seeds of the mean validation reward at the final step);
* equal groups: the mean over tuning seeds of the exact expected training success (the
  `train` target of `hbsim.scenarios.target_truth`: the validation split has no noise-free
  column and is evaluated only at the final step) read at the part's common milestone, the
  largest number of generated groups every tuning run of the part reached, by linear
  interpolation (`ablations.scenarios.equal_groups`, the claim's own reading).

In each reading g(point, s) = score(point, s) - score(uniform, s), normalised by the largest
|g(., s)| over points, so every scenario weighs the same whatever its reward scale:

    criterion = 1/2 (mean_s g_steps / max |g_steps|  +  mean_s g_groups / max |g_groups|)

and the point with the largest criterion is selected (ties: the point listed first). It
prints every point's criterion, both readings, per-scenario gains, and the chosen setting.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ablations.scenarios import equal_groups
from ablations.spec import load_spec
from ablations.tune import select, tuning_cells
from hbsim.contract import PART
from hbsim.contract.labels import part_suffix
from hbsim.contract.records import canonical_json, load_cells

DESIGN, BASELINE = "robust", "uniform"


def groups_scores(part, tune_dir: Path, name: str, equal_groups) -> dict:
    """{design label: {setting json: mean over tuning seeds of the equal-groups score}} of one part."""
    groups = tuning_cells(part)
    cells = {c.id: (label, {k: v for k, v in c.sweep.items() if k != PART})
             for label, group in groups.items() for c in group}
    train, _ = load_cells(tune_dir, only=set(cells), eval_columns=["run_id"])
    wide, _ = equal_groups(train, name, "train")                 # seed x policy label (part suffix dropped)
    suffix = part_suffix(name)
    labels = train.drop_duplicates("run_id").set_index("run_id")["policy"].str[: -len(suffix)]
    out: dict[str, dict] = {}
    for cid, (design, setting) in cells.items():
        key = canonical_json(setting)
        out.setdefault(design, {})[key] = float(wide[labels[cid]].mean())
    return out


def _normalised(gains: list[dict], names: list[str]) -> list[float]:
    """Per point: mean over scenarios of its gain over that scenario's largest |gain|."""
    scale = {n: max(abs(g[n]) for g in gains) or 1.0 for n in names}
    return [float(np.mean([g[n] / scale[n] for n in names])) for g in gains]


def criterion(spec, root: Path) -> tuple[list[dict], list[str]]:
    """(one row per point of the robust design: setting, per-part gains at equal steps and at
    equal groups, both normalised readings and the criterion; part names)."""
    entries: dict[str, dict] = {}
    names = []
    # where `hb grid run` put the tuning cells: DIR/tune/ where a grid of parts runs its tuned
    # parts in two phases (issue 28's ablations.tune.is_tuned), else DIR itself
    tune_dir = root / "tune" if (root / "tune" / "grid.json").is_file() else root
    for part in spec.parts:
        name = part.name.split("/", 1)[1]
        names.append(name)
        chosen = select(part, tune_dir)["designs"]
        base = chosen[BASELINE]["score"]
        at_groups = groups_scores(part, tune_dir, name, equal_groups)
        base_groups = next(iter(at_groups[BASELINE].values()))
        for row in chosen[DESIGN]["points"]:
            setting = {k: v for k, v in row["setting"].items() if k != PART}      # the part's own sweep key
            key = canonical_json(setting)
            entry = entries.setdefault(key, {"setting": setting, "gains": {}, "gains_groups": {}})
            entry["gains"][name] = row["score"] - base
            entry["gains_groups"][name] = at_groups[DESIGN][key] - base_groups
    rows = list(entries.values())
    for e, steps, groups in zip(rows, _normalised([e["gains"] for e in rows], names),
                                _normalised([e["gains_groups"] for e in rows], names)):
        e["steps"], e["groups"] = steps, groups
        e["criterion"] = 0.5 * (steps + groups)
        e["below_uniform"] = sum(e["gains"][n] < 0 for n in names)
        e["below_uniform_groups"] = sum(e["gains_groups"][n] < 0 for n in names)
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
    print(f"{'setting':<{width}}  criterion   steps  groups  below uniform (steps/groups)  "
          + "  ".join(f"{n:>12}" for n in names) + "  (gain at equal steps | equal groups)")
    for j in sorted(range(len(rows)), key=lambda j: -rows[j]["criterion"]):
        r = rows[j]
        print(f"{canonical_json(r['setting']):<{width}}  {r['criterion']:+9.3f}  {r['steps']:+.3f}  {r['groups']:+.3f}"
              f"  {r['below_uniform']:>15}/{r['below_uniform_groups']:<12}  "
              + "  ".join(f"{r['gains'][n]:+.3f}|{r['gains_groups'][n]:+.3f}" for n in names))
    print(f"selected: {canonical_json(rows[best]['setting'])} (criterion {rows[best]['criterion']:+.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps({"scenarios": names, "points": rows, "selected": rows[best]},
                                              indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
