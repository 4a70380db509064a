"""Fair comparisons in a report: designs at equal cost (`hb report DIR --budget UNIT [--at V]`)
and the setting each design of a tuned grid used (DIR/tune.json, `ablations.tune`).

Equal cost: runs with the run knob `eval_budget` ("groups:500,1000") also evaluated when
their cumulative cost first crossed each milestone (hbsim.loop, eval rows tagged
BUDGET_COLUMNS). `frames_at(DIR, unit, at)` keeps, of every run, the evaluation at ONE
milestone -- `at`, or the largest milestone that every run of DIR reached -- and hands it
to the report as if it were each run's final evaluation, so the same seed-level tests
compare designs at equal cost. `ranking_lines` says whether the order of the designs by
mean reward (per suite) at equal steps holds at that cost.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract import BUDGET_COLUMNS, BUDGET_UNIT, BUDGET_UNITS, BUDGET_VALUE, COST_REACHED, TUNE_JSON
from policies.errors import UserError
from reports import load


def check_unit(unit: str) -> str:
    if unit not in BUDGET_UNITS:
        raise UserError(f"--budget: got {unit!r}, allowed: one of {', '.join(BUDGET_UNITS)}")
    return unit


def reached(ev: pd.DataFrame, unit: str) -> list[float]:
    """The milestones of `unit` that every run of the raw eval table `ev` reached, ascending."""
    if BUDGET_UNIT not in ev.columns or not (ev[BUDGET_UNIT] == unit).any():
        raise UserError(f"--budget {unit}: no run of DIR was evaluated at a {unit} budget; allowed: a unit its runs "
                        "recorded (run them with eval_budget = \"" + unit + ":M1,M2,...\")")
    runs = ev.groupby("run_id", sort=True)
    sets = [set(g.loc[g[BUDGET_UNIT] == unit, BUDGET_VALUE].astype(float)) for _, g in runs]
    return sorted(set.intersection(*sets))


def select_at(ev: pd.DataFrame, unit: str, at: float | None) -> tuple[pd.DataFrame, float]:
    """(the eval rows of every run at the milestone, without the budget columns; the milestone)."""
    common = reached(ev, unit)
    if at is None:
        if not common:
            raise UserError(f"--budget {unit}: no milestone was reached by every run of DIR; rerun with a smaller "
                            "eval_budget milestone or more steps")
        at = common[-1]
    elif float(at) not in common:
        raise UserError(f"--at: got {at!r}, allowed: a {unit} milestone every run reached ({common or 'none'})")
    at = float(at)
    rows = ev[(ev[BUDGET_UNIT] == unit) & (ev[BUDGET_VALUE].astype(float) == at)]
    return rows.drop(columns=[c for c in BUDGET_COLUMNS if c in rows.columns]).reset_index(drop=True), at


def frames_at(dir_path, unit: str, at: float | None = None, extra: tuple[str, ...] = (),
              part: str | None = None) -> tuple[load.Frames, dict]:
    """The Frames of DIR (of its part `part`, `load.one_part`) at one milestone (module doc)
    and what was selected: {"unit", "at", "cost": policy -> mean cost reached over its
    runs, "steps": policy -> mean step}."""
    check_unit(unit)
    info: dict = {"unit": unit, "largest": at is None}

    def select(ev: pd.DataFrame) -> pd.DataFrame:
        rows, info["at"] = select_at(ev, unit, at)
        tagged = ev[(ev[BUDGET_UNIT] == unit) & (ev[BUDGET_VALUE].astype(float) == info["at"])]
        per_run = tagged.drop_duplicates("run_id")
        info["cost"] = per_run.groupby("policy")[COST_REACHED].mean().astype(float).to_dict()
        info["steps"] = per_run.groupby("policy")["step"].mean().astype(float).to_dict()
        return rows

    return load.read_dir(dir_path, extra=extra, select=select, part=part), info


def mean_rank(final: pd.DataFrame) -> dict[str, list[str]]:
    """suite -> policy labels by mean reward (over seeds, tasks, attempts) of the final rows,
    best first (ties by label)."""
    out = {}
    for suite, g in final.groupby("suite", sort=True):
        means = g.groupby(["policy", "seed"])["reward"].mean().groupby("policy").mean()
        out[str(suite)] = sorted(means.index, key=lambda p: (-round(float(means[p]), 12), p))
    return out


def ranking_lines(steps: load.Frames, cost: load.Frames, info: dict) -> list[str]:
    """Whether the ranking at equal steps holds at equal cost, one line per suite (+ the selection)."""
    at = info["at"]
    shown = f"{int(at)}" if at == int(at) else f"{at:g}"
    lines = [f"equal cost: every run at its first evaluation with {info['unit']} >= {shown} (the largest milestone "
             "every run reached)" if info.get("largest") else
             f"equal cost: every run at its first evaluation with {info['unit']} >= {shown}"]
    lines.append("  mean step there: " + ", ".join(f"{p} {s:.1f}" for p, s in sorted(info["steps"].items())))
    a, b = mean_rank(steps.eval), mean_rank(cost.eval)
    for suite in sorted(set(a) & set(b)):
        verdict = "holds" if a[suite] == b[suite] else "changes"
        lines.append(f"  {suite}: ranking at equal steps {' > '.join(a[suite])}; at equal {info['unit']} "
                     f"{' > '.join(b[suite])}: {verdict}")
    return lines


def tuned_lines(dir_path, part: str | None = None) -> list[str]:
    """One line per design of a tuned grid (DIR/tune.json): the setting it was tested with (of a
    grid of parts, `hb stress`'s: the record of `part`, none when that part was not tuned)."""
    path = Path(dir_path) / TUNE_JSON
    if not path.is_file():
        return []
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: unreadable tuning record ({exc}); expected the JSON object hb grid run writes")
    if isinstance(record, dict) and "parts" in record:
        record = (record.get("parts") or {}).get(part)
        if not isinstance(record, dict):
            return []
    lines = [f"tuned on seeds {record.get('seeds')} by suite {record.get('target')!r} (mean reward at the final "
             f"step); tested on seeds {record.get('test_seeds')}:"]
    for label, sel in record.get("designs", {}).items():
        setting = ", ".join(f"{k}={json.dumps(v)}" for k, v in sel.get("setting", {}).items()) or "(defaults)"
        score = sel.get("score")
        lines.append(f"  {label}: {setting}" + (f"  ({record.get('target')} {score:.4f})" if isinstance(score, float)
                                                 and np.isfinite(score) else ""))
    return lines
