"""Fair comparisons in a report: designs at equal cost (`hb report DIR --budget UNIT [--at V]`)
and the setting each design of a tuned grid used (DIR/tune.json, `ablations.tune`).

Equal cost: runs with the run knob `eval_budget` ("tokens:20000") also evaluated when
their cumulative cost first crossed each milestone (hbsim.loop, eval rows tagged
BUDGET_COLUMNS). A design with expensive steps crosses late: its first evaluation past the
milestone may cost several times the milestone. So every run is read at EXACTLY the
milestone M (`select`): between the last evaluation below M (an ordinary one, `eval_every`,
whose cost is the cumulative train cost at its step, or the evaluation of a smaller
milestone; step 0 costs 0) at cost c_lo and the first one at or past M at cost c_hi, each
per-task metric is interpolated linearly in cost, weight w = (M - c_lo) / (c_hi - c_lo) on
the upper one (`reports.readings.at_cost.weight`; `cells_at`: on the cells, so pass@k is the interpolation of pass@k). A run
with nothing below M is read at its first evaluation past it; when the cost read differs
from M by more than `tolerance` (default 5%) for any run, the report refuses, naming the
designs (nothing can correct it but evaluations below M). `cost_table` is what was read,
per run (budget.csv); `cost_lines` prints each design's cost.

`ranking_lines` compares the order of the designs by mean score at equal steps (their final
evaluation) with the order at equal cost, per suite; a swap is called a change only when
the seed-level sign-flip test of the pair's difference-of-differences (equal steps minus
equal cost, per seed), Holm over the swapped pairs of the suite, is below alpha.
"""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from hbsim.contract import BUDGET_COLUMNS, BUDGET_UNIT, BUDGET_UNITS, BUDGET_VALUE, COST_REACHED
from hbsim.contract.records import read_tune
from policies.errors import UserError
from reports import load, stats
from reports.cells import CELL_KEYS, cell_metrics
from reports.readings import at_cost

#: the largest relative difference |cost read / milestone - 1| of a run read without interpolation
DEFAULT_TOLERANCE = 0.05
#: how a run was read at the milestone (budget.csv's `rule`)
RULES = {"exact": "an evaluation at exactly the milestone",
         "interpolated": "interpolated linearly in cost between the two evaluations that bracket the milestone",
         "past": "its first evaluation past the milestone (no evaluation below it to interpolate from)"}


def check_unit(unit: str) -> str:
    if unit not in BUDGET_UNITS:
        raise UserError(f"--budget: got {unit!r}, allowed: one of {', '.join(BUDGET_UNITS)}")
    return unit


def check_tolerance(tolerance: float) -> float:
    if not (np.isfinite(tolerance) and 0 <= tolerance < 1):
        raise UserError(f"--cost-tolerance: got {tolerance!r}, allowed: a fraction 0 <= t < 1")
    return float(tolerance)


def reached(ev: pd.DataFrame, unit: str) -> list[float]:
    """The milestones of `unit` that every run of the raw eval table `ev` reached, ascending."""
    if BUDGET_UNIT not in ev.columns or not (ev[BUDGET_UNIT] == unit).any():
        raise UserError(f"--budget {unit}: no run of DIR was evaluated at a {unit} budget; allowed: a unit its runs "
                        "recorded (run them with eval_budget = \"" + unit + ":M1,M2,...\")")
    runs = ev.groupby("run_id", sort=True)
    sets = [set(g.loc[g[BUDGET_UNIT] == unit, BUDGET_VALUE].astype(float)) for _, g in runs]
    return sorted(set.intersection(*sets))


def milestone(ev: pd.DataFrame, unit: str, at: float | None) -> float:
    """`at` (checked: every run reached it) or the largest milestone every run reached."""
    common = reached(ev, unit)
    if at is None:
        if not common:
            raise UserError(f"--budget {unit}: no milestone was reached by every run of DIR; rerun with a smaller "
                            "eval_budget milestone or more steps")
        return float(common[-1])
    if float(at) not in common:
        raise UserError(f"--at: got {at!r}, allowed: a {unit} milestone every run reached ({common or 'none'})")
    return float(at)


def select(raw: pd.DataFrame, train: pd.DataFrame | None, unit: str, at: float,
           tolerance: float = DEFAULT_TOLERANCE) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(upper rows, lower rows, cost table) of every run at milestone ``at`` (module doc).

    raw: every eval row of the runs (budget rows included); train: their train rows (the
    cost of an ordinary evaluation is the cumulative cost at its step). upper: each run's
    first evaluation at or past the milestone; lower: its last evaluation below it (runs
    read without interpolation have none), both without the budget columns. The cost table
    (one row per run): policy, seed, run_id, unit, milestone, step_below, cost_below,
    step_above, cost_above, weight (on the upper evaluation), cost_read, rule (RULES).
    Raises UserError naming the designs where a run's cost read is off by more than tolerance."""
    is_budget = raw[BUDGET_UNIT].notna() if BUDGET_UNIT in raw.columns else pd.Series(False, index=raw.index)
    tagged = raw[(raw[BUDGET_UNIT] == unit) & (raw[BUDGET_VALUE].astype(float) == at)] if is_budget.any() else raw[:0]
    drop = [c for c in BUDGET_COLUMNS if c in raw.columns]
    ordinary = load.step_rows(raw)
    costs = at_cost.step_costs(train, unit)
    known = ordinary[["run_id", "step"]].drop_duplicates().merge(costs, on=["run_id", "step"], how="inner")
    in_unit = raw[is_budget & (raw[BUDGET_UNIT] == unit)]
    smaller = in_unit[["run_id", "step", COST_REACHED]].drop_duplicates()
    # one pass each, not one scan per run
    by_run = {k: g for k, g in ordinary.groupby("run_id", sort=False)}
    budget_by_run = {k: g for k, g in in_unit.groupby("run_id", sort=False)}
    known_by_run = {k: g for k, g in known[known["cost"] < at].groupby("run_id", sort=False)}
    smaller_by_run = {k: g for k, g in smaller[smaller[COST_REACHED].astype(float) < at].groupby("run_id", sort=False)}
    rows, uppers, lowers = [], [], []
    for run_id, up in tagged.groupby("run_id", sort=True):
        step_hi, c_hi = int(up["step"].iloc[0]), float(up[COST_REACHED].iloc[0])
        below, below_b = known_by_run.get(run_id, known[:0]), smaller_by_run.get(run_id, smaller[:0])
        below, below_b = below[below["step"] < step_hi], below_b[below_b["step"] < step_hi]
        row = {"policy": str(up["policy"].iloc[0]), "seed": int(up["seed"].iloc[0]), "run_id": str(run_id),
               "unit": unit, "milestone": at, "step_below": np.nan, "cost_below": np.nan, "step_above": step_hi,
               "cost_above": c_hi, "weight": 1.0, "cost_read": c_hi, "rule": "exact" if c_hi == at else "past"}
        if c_hi > at and (len(below) or len(below_b)):
            use_ordinary = len(below) and (not len(below_b) or below["step"].max() >= below_b["step"].max())
            if use_ordinary:
                pick = below.loc[below["step"].idxmax()]
                g = by_run[run_id]
                lo = g[g["step"] == pick["step"]]
                c_lo = float(pick["cost"])
            else:
                pick = below_b.loc[below_b["step"].idxmax()]
                g = budget_by_run[run_id]
                lo = g[g["step"] == pick["step"]]
                lo = lo[lo[BUDGET_VALUE] == lo[BUDGET_VALUE].iloc[0]]      # one copy of that evaluation
                c_lo = float(pick[COST_REACHED])
            w = at_cost.weight(at, c_lo, c_hi)
            row.update(step_below=int(pick["step"]), cost_below=c_lo, weight=w, cost_read=at, rule="interpolated")
            lowers.append(lo.drop(columns=drop))
        uppers.append(up.drop(columns=drop))
        rows.append(row)
    table = pd.DataFrame(rows)
    off = table[(table["cost_read"] / at - 1.0).abs() > tolerance + 1e-12]
    if len(off):
        worst = off.groupby("policy")["cost_read"].max() / at
        named = ", ".join(f"{p} (up to {v:.2f}x)" for p, v in worst.items())
        raise UserError(f"--budget {unit}: the cost read at the milestone {at:g} differs by more than "
                        f"{tolerance:.0%} (--cost-tolerance) for design(s) {named}, and no evaluation below the "
                        "milestone can correct it (interpolation needs one); rerun them with eval_every or a "
                        "smaller eval_budget milestone below it, or pass a larger --cost-tolerance")
    upper = pd.concat(uppers, ignore_index=True)
    lower = pd.concat(lowers, ignore_index=True) if lowers else upper.iloc[:0]
    return upper, lower, table


def frames_at(dir_path, unit: str, at: float | None = None, extra: tuple[str, ...] = (),
              part: str | None = None, tolerance: float = DEFAULT_TOLERANCE) -> tuple[load.Frames, dict]:
    """The Frames of DIR (of its part `part`, `load.one_part`) at one milestone (module doc):
    eval = every run's first evaluation at or past it, train and eval_all = the train rows
    and ordinary evaluations up to that step; and what was selected: {"unit", "at",
    "largest", "tolerance", "lower": the rows below, "table": `select`'s cost table,
    "steps": the final (equal-steps) evaluation}. `cells_at` turns the two into the cells."""
    check_unit(unit)
    check_tolerance(tolerance)
    kept: dict = {}

    def keep(ev: pd.DataFrame) -> pd.DataFrame:
        kept["raw"] = ev
        return load.step_rows(ev)

    base = load.read_dir(dir_path, extra=extra, select=keep, part=part)
    raw = kept["raw"]
    at_value = milestone(raw, unit, at)
    upper, lower, table = select(raw, base.train, unit, at_value, tolerance)
    train = base.train
    if train is not None:
        last = train["run_id"].map(table.set_index("run_id")["step_above"])
        train = train[(train["step"] <= last).to_numpy()].reset_index(drop=True)
    frames = load.make_frames(upper, train, runs=base.runs, source=base.source, extra=extra)
    frames.part = part
    # the learning curves (training diagnostics) up to the milestone: the ordinary evaluations to each
    # run's crossing step
    curve = base.eval_all["run_id"].map(table.set_index("run_id")["step_above"])
    frames.eval_all = base.eval_all[(base.eval_all["step"] <= curve).to_numpy()].reset_index(drop=True)
    lower = load.validate_eval(lower, extra) if len(lower) else lower
    info = {"unit": unit, "at": at_value, "largest": at is None, "tolerance": tolerance, "lower": lower,
            "table": table, "steps": base.eval}
    return frames, info


def cells_at(fr: load.Frames, info: dict, ks) -> pd.DataFrame:
    """`cells.cell_metrics` at the milestone: each run's cells of its evaluation past the
    milestone, where the run was interpolated mixed with those of its evaluation below
    (weight 1 - w), every metric column (and the success count c) alike."""
    upper = cell_metrics(fr.eval, ks)
    lower = info.get("lower")
    table = info["table"]
    if lower is None or not len(lower):
        return upper
    low = cell_metrics(lower, ks).set_index(CELL_KEYS)
    run_w = table.set_index(["policy", "seed"])["weight"]
    w = pd.MultiIndex.from_frame(upper[["policy", "seed"]]).map(run_w.to_dict()).to_numpy(dtype=float)
    mixed = upper.copy()
    cols = [c for c in upper.columns if c not in CELL_KEYS + ["category", "n"]]
    idx = pd.MultiIndex.from_frame(upper[CELL_KEYS])
    below = low.reindex(idx)
    has = (w < 1.0) & below["n"].notna().to_numpy()
    for col in cols:
        lo = below[col].to_numpy(dtype=float)
        mixed[col] = np.where(has, (1.0 - w) * lo + w * upper[col].to_numpy(dtype=float), upper[col].to_numpy())
    return mixed


def views_frames(fr: load.Frames) -> load.Frames:
    """The Frames rliable's views read in a budget report: the runs reach the milestone at
    different steps, so 'IQM over steps' has one point, the reading at the milestone (step 0)."""
    return dataclasses.replace(fr, eval_all=fr.eval.assign(step=0))


def run_scores(cells: pd.DataFrame) -> pd.DataFrame:
    """(policy, seed, suite, score): each run's mean cell score per suite (the share-of-gap input)."""
    return cells.groupby(["policy", "seed", "suite"], as_index=False)["score"].mean()


def train_at(train: pd.DataFrame | None, unit: str, at: float) -> pd.DataFrame | None:
    """The train table reduced to one row per run at exactly the milestone: the `true_*`
    columns read at it (`reports.readings.at_cost.runs_at`), for the share of gap's `train` target."""
    if train is None or train.empty:
        return train
    return at_cost.runs_at(train, unit, at, [c for c in train.columns if c.startswith("true_")])


def cost_lines(info: dict) -> list[str]:
    """Each design's cost read (mean, largest) and how its runs were read."""
    table, at = info["table"], info["at"]
    lines = [f"budget report: every run at exactly {info['unit']} = {at:g}"
             + (" (the largest milestone every run reached)" if info.get("largest") else "")
             + f"; rule: {RULES['interpolated']} (a run with nothing below it: read at its first evaluation past "
             f"it, refused beyond {info['tolerance']:.0%} of the milestone)"]
    for pol, g in table.groupby("policy", sort=True):
        rules = ", ".join(f"{n} {r}" for r, n in g["rule"].value_counts().sort_index().items())
        lines.append(f"  {pol}: cost read {g['cost_read'].mean():,.6g} (mean over {len(g)} runs, largest "
                     f"{g['cost_read'].max():,.6g}); first evaluation past it at {g['cost_above'].mean():,.6g} "
                     f"(up to {g['cost_above'].max() / at:.2f}x); runs: {rules}")
    return lines


def _seed_means(cells: pd.DataFrame) -> pd.DataFrame:
    """(suite, policy) x seed of mean score over each run's tasks."""
    return cells.groupby(["suite", "policy", "seed"])["score"].mean()


def ranking_rows(steps_cells: pd.DataFrame, cost_cells: pd.DataFrame, alpha: float, *, resamples: int = 10000,
                 rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Per suite and pair of designs whose order by mean score differs between equal steps and
    equal cost: the seed-level sign-flip test of e_s = (a_s - b_s at equal steps) - (a_s - b_s
    at equal cost) over the seeds both readings share, Holm over the swapped pairs of the
    suite. Columns: suite, first, second (the order at equal steps), n_seeds, change, p_seed,
    p_holm. No swapped pair: no row."""
    rng = np.random.default_rng(0) if rng is None else rng
    a, b = _seed_means(steps_cells), _seed_means(cost_cells)
    rows = []
    for suite in sorted(set(a.index.get_level_values(0)) & set(b.index.get_level_values(0))):
        sa, sb = a.loc[suite].unstack("seed"), b.loc[suite].unstack("seed")
        pols = sorted(set(sa.index) & set(sb.index))
        seeds = sorted(set(sa.dropna(axis=1).columns) & set(sb.dropna(axis=1).columns))
        if len(pols) < 2 or not seeds:
            continue
        sa, sb = sa.loc[pols, seeds], sb.loc[pols, seeds]
        ma, mb = sa.mean(axis=1).round(12), sb.mean(axis=1).round(12)
        first = []
        for i, p in enumerate(pols):
            for q in pols[i + 1:]:
                if np.sign(ma[p] - ma[q]) * np.sign(mb[p] - mb[q]) < 0:
                    hi, lo = (p, q) if ma[p] > ma[q] else (q, p)
                    e = (sa.loc[hi] - sa.loc[lo]) - (sb.loc[hi] - sb.loc[lo])
                    p_seed = stats.sign_flip_test(e.to_numpy(float), resamples=resamples, rng=rng) \
                        if len(seeds) > 1 else np.nan
                    first.append({"suite": suite, "first": hi, "second": lo, "n_seeds": len(seeds),
                                  "change": float(e.mean()), "p_seed": p_seed})
        if first:
            holm = stats.adjust(np.array([r["p_seed"] for r in first]), "holm")
            for r, ph in zip(first, holm):
                rows.append({**r, "p_holm": float(ph)})
    return pd.DataFrame(rows, columns=["suite", "first", "second", "n_seeds", "change", "p_seed", "p_holm"])


def ranking_lines(steps_cells: pd.DataFrame, cost_cells: pd.DataFrame, info: dict, alpha: float = 0.05,
                  swaps: pd.DataFrame | None = None) -> list[str]:
    """Whether the ranking at equal steps holds at equal cost, one line per suite: 'holds' (same
    order), 'changes' (a swapped pair passes the seed-level test, `ranking_rows`) or 'no
    detectable change' (the order differs, no swap passes it)."""
    swaps = ranking_rows(steps_cells, cost_cells, alpha) if swaps is None else swaps
    lines = cost_lines(info)
    a, b = _seed_means(steps_cells), _seed_means(cost_cells)
    for suite in sorted(set(a.index.get_level_values(0)) & set(b.index.get_level_values(0))):
        ra, rb = _order(a.loc[suite]), _order(b.loc[suite])
        mine = swaps[swaps["suite"] == suite]
        if ra == rb or mine.empty:
            verdict = "holds"
        elif (mine["p_holm"] < alpha).any():
            sig = mine[mine["p_holm"] < alpha]
            verdict = "changes (" + "; ".join(f"{r['first']} vs {r['second']}: p_holm = {r['p_holm']:.3f}"
                                              for _, r in sig.iterrows()) + ", seed-level sign-flip)"
        else:
            verdict = (f"no detectable change (the point order differs, but no swapped pair passes the seed-level "
                       f"test: smallest p_holm = {mine['p_holm'].min():.3f})")
        lines.append(f"  {suite}: ranking at equal steps {' > '.join(ra)}; at equal {info['unit']} "
                     f"{' > '.join(rb)}: {verdict}")
    return lines


def _order(means: pd.Series) -> list[str]:
    m = means.groupby(level="policy").mean()
    return sorted(m.index, key=lambda p: (-round(float(m[p]), 12), p))


def tuned_lines(dir_path, part: str | None = None) -> list[str]:
    """One line per design of a tuned grid (DIR/tune.json): the setting it was tested with (of a
    grid of parts, `hb stress`'s: the record of `part`, none when that part was not tuned)."""
    record = read_tune(dir_path)      # shape checked; `hb report` read it once before any work
    if record is None:
        return []
    if "parts" in record:
        record = record["parts"].get(part)
        if record is None:
            return []
    lines = [f"tuned on seeds {record.get('seeds')} by suite {record.get('target')!r} (mean reward at the final "
             f"step); tested on seeds {record.get('test_seeds')}:"]
    for label, sel in record["designs"].items():
        setting = ", ".join(f"{k}={json.dumps(v)}" for k, v in sel["setting"].items()) or "(defaults)"
        score = sel.get("score")
        lines.append(f"  {label}: {setting}" + (f"  ({record.get('target')} {score:.4f})" if isinstance(score, float)
                                                 and np.isfinite(score) else ""))
    return lines
