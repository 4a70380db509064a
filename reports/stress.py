"""The `hb stress` profile: how much of the achievable gain each policy captures in each
scenario, on every axis (horizon 1x and 3x, step size x1 and x0.5), from the collected tables
of a grid of parts (`ablations.stress`: one part per scenario and axis, and beside each its
best-fixed-arm part). Nothing here runs anything.

Per scenario, axis and the scenario's declared target (train | heldout_tasks |
heldout_harness), for every policy: `reports.readings.references.share_of_gap` (the one implementation:
share = mean_s (P_s - U_s) / mean_s (R_s - U_s), R the best reachable reference -- the
oracle, the best fixed arm chosen on tuning seeds, `mixed`: the largest mean -- with
Fieller's interval; no share when R's own gap over uniform is not significant), plus the
paired seed-level tests: P_s - U_s against 0 (`reports.stats.t_test_p`, two-sided, and the
exact sign-flip `sign_flip_test`), and the one-sided t test of mean(d_s - 0.5 g_s) > 0
(`t_test_greater_p`, `p_half`: "captures at least half of the reference's gain"). The
Benjamini-Hochberg q of each family is taken over all the designs' cells of the profile (`q`,
`q_half`; the oracle's and the best fixed arm's rows keep their p but get no q).
The reference's own gap R_s - U_s gets the two-sided t test too (`gap_p`).

A cell's verdict (`verdict`): "half" where q_half < ALPHA, "below" where q < ALPHA and the
delta is negative (falls below uniform), else "". The reading (`reading`) states a verdict
only where it holds on EVERY axis of the scenario, and names each verdict that FLIPS between
axes with the axes it holds on; the references themselves (oracle, best fixed arm) get no
verdict.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.contract.atomic import atomic_write
from hbsim.contract.labels import BEST_FIXED, FIXED, ORACLE, of_part, strip_part
from reports.readings.references import run_table, share_of_gap, train_scores
from reports.readings.summary import final_scores
from reports import figures
from reports.page import CSS, Doc
from reports.stats import adjust, sign_flip_test, t_test_greater_p, t_test_p

ALPHA = 0.05
SIGN_FLIP_RESAMPLES = 10_000
#: the share whose one-sided test makes the "captures at least half" label
HALF = 0.5
#: the columns of `profile` (profile.csv), the contract's eight first
COLUMNS = ["scenario", "policy", "horizon", "step_scale", "share", "share_low", "share_high", "reference",
           "target", "steps", "seeds", "delta", "delta_t95", "gap", "gap_p", "p", "p_signflip", "q", "p_half",
           "q_half", "verdict", "note"]
PHRASES = {"half": "capture{s} >= 50% of the reference's gain", "below": "fall{s} below uniform"}


def scores_of(train: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Final scores per (policy label, seed, suite): eval suites and the train target."""
    return pd.concat([final_scores(evals)[["policy", "seed", "suite", "score"]], train_scores(train)],
                     ignore_index=True)


def axis_label(horizon, step_scale) -> str:
    """`1x/lr1`, `3x/lr0.5`: an axis in one word."""
    return f"{int(horizon)}x/lr{float(step_scale):g}"


def _with_best_fixed(scores: pd.DataFrame, runs: pd.DataFrame, part: str) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """The best-fixed-arm part's `fixed` runs as the pseudo-policy `best_fixed`: (its score rows,
    its run rows, its label with the arm, e.g. `best_fixed[arm=2]`; "" without them)."""
    mine, mine_runs = of_part(scores, "policy", part), of_part(runs, "label", part)
    mine_runs = mine_runs[mine_runs["name"] == FIXED]
    mine = mine[mine["policy"].isin(mine_runs["label"])]
    if mine.empty:
        return mine.iloc[:0], mine_runs.iloc[:0], ""
    arms = sorted(set(mine_runs["arm"]))
    return (mine.assign(policy=BEST_FIXED), mine_runs.assign(label=BEST_FIXED),
            f"{BEST_FIXED}[arm={'/'.join(map(str, arms))}]")


def _part_rows(scores: pd.DataFrame, runs: pd.DataFrame, part: str, info: dict) -> list[dict]:
    """The profile rows of one designs' part (its best fixed arm joined)."""
    target = info["target"]
    mine, mine_runs = of_part(scores, "policy", part), of_part(runs, "label", part)
    fixed, fixed_runs, fixed_label = _with_best_fixed(scores, runs, info.get("fixed_part", ""))
    mine, mine_runs = pd.concat([mine, fixed], ignore_index=True), pd.concat([mine_runs, fixed_runs], ignore_index=True)
    table = share_of_gap(mine, mine_runs)
    table = table[table["suite"] == target]
    if table.empty:
        return []
    wide = mine[mine["suite"] == target].pivot_table(index="seed", columns="policy", values="score")
    uni, ref = table["uniform"].iloc[0], table["reference"].iloc[0]
    names = dict(zip(mine_runs["label"], mine_runs["name"]))
    shown = {BEST_FIXED: fixed_label}          # as the reference: with its arm
    rows = []
    for r in table.itertuples():
        both = wide[list(dict.fromkeys([r.policy, uni, ref]))].dropna()
        d, g = (both[r.policy] - both[uni]).to_numpy(), (both[ref] - both[uni]).to_numpy()
        has_share = bool(np.isfinite(r.share))
        rows.append({"scenario": info["scenario"], "policy": r.policy,
                     "horizon": info["horizon"], "step_scale": info["step_scale"], "share": r.share,
                     "share_low": r.share_lo, "share_high": r.share_hi, "reference": shown.get(ref, ref),
                     "target": target, "steps": info.get("steps"), "seeds": r.seeds, "delta": r.delta,
                     "delta_t95": r.delta_t95, "gap": r.gap, "gap_p": t_test_p(g), "p": t_test_p(d),
                     "p_signflip": sign_flip_test(d, resamples=SIGN_FLIP_RESAMPLES, rng=np.random.default_rng(0)),
                     "p_half": t_test_greater_p(d - HALF * g) if has_share else np.nan,
                     "note": r.note, "_reference": names.get(r.policy) in (ORACLE, FIXED) or r.policy == BEST_FIXED})
    return rows


def profile(train: pd.DataFrame, evals: pd.DataFrame, metas: list[dict], parts: dict[str, dict]) -> pd.DataFrame:
    """One row per (scenario, axis, policy) on the scenario's target, columns COLUMNS (module
    docstring). `parts`: designs' part -> {scenario, target, horizon, step_scale, steps,
    fixed_part} (`ablations.stress.profile_parts`). Parts without uniform and oracle runs are
    left out."""
    scores, runs = scores_of(train, evals), run_table(metas)
    rows = [row for part, info in parts.items() for row in _part_rows(scores, runs, part, info)]
    out = pd.DataFrame(rows, columns=COLUMNS + ["_reference"])
    order = {label: i for i, label in enumerate(dict.fromkeys(strip_part(runs["label"])))}   # the runs' order
    out = out.sort_values("policy", key=lambda col: col.map(lambda v: order.get(v, len(order))), kind="stable")
    scen = list(dict.fromkeys(info["scenario"] for info in parts.values()))
    out = out.sort_values(["scenario", "horizon", "step_scale"], key=lambda col: (
        col.map(scen.index) if col.name == "scenario" else (-col if col.name == "step_scale" else col)), kind="stable")
    out = out.reset_index(drop=True)
    designs = ~out["_reference"].astype(bool).to_numpy()     # the families: the designs' cells, not the yardstick's
    for col, q in (("p", "q"), ("p_half", "q_half")):
        out[q] = adjust(np.where(designs, out[col].to_numpy(dtype=float), np.nan), "fdr_bh") if len(out) else []
    verdict = np.where(out["q_half"] < ALPHA, "half", np.where((out["q"] < ALPHA) & (out["delta"] < 0), "below", ""))
    out["verdict"] = np.where(designs, verdict, "")
    return out.drop(columns="_reference")[COLUMNS]


def _names(policies) -> str:
    policies = list(policies)
    return policies[0] if len(policies) == 1 else ", ".join(policies[:-1]) + " and " + policies[-1]


def _phrase(verdict: str, n: int) -> str:
    return PHRASES[verdict].format(s="s" if n == 1 else "")


def reading(prof: pd.DataFrame) -> str:
    """The one-paragraph reading of a profile (module docstring): what holds on every axis, and
    where a verdict flips between axes."""
    if prof.empty:
        return "No scenario has both a uniform and a reference run: nothing to profile."
    prof = prof.assign(axis=[axis_label(h, s) for h, s in zip(prof["horizon"], prof["step_scale"])])
    axes_all = list(dict.fromkeys(prof["axis"]))
    robust, flips, quiet, unposed = [], [], [], []
    for scenario, rows in prof.groupby("scenario", sort=False):
        axes = list(dict.fromkeys(rows["axis"]))
        held, flipped = {"half": [], "below": []}, []
        for policy, cells in rows.groupby("policy", sort=False):
            by_axis = dict(zip(cells["axis"], cells["verdict"]))
            for v in ("half", "below"):
                on = [a for a in axes if by_axis.get(a) == v]
                if on and len(on) == len(axes):
                    held[v].append(policy)
                elif on:
                    flipped.append(f"{policy} {_phrase(v, 1)} at {', '.join(on)} only")
        parts = [f"{_names(p)} {_phrase(v, len(p))}" for v, p in held.items() if p]
        if parts:
            robust.append(f"in {scenario} ({rows['target'].iloc[0]}), " + "; ".join(parts))
        else:
            quiet.append(scenario)
        if flipped:
            flips.append(f"in {scenario}, " + "; ".join(flipped))
        gaps = rows.drop_duplicates("axis")
        no_gap = gaps[~(gaps["gap_p"] < ALPHA) | (gaps["gap"] <= 0)]["axis"].tolist()
        if no_gap:
            unposed.append(f"{scenario} ({', '.join(no_gap)})")
    one = len(axes_all) == 1            # `hb stress --quick`: no second axis to hold or flip on
    text = (f"On {'its one axis' if one else 'every axis'} ({', '.join(axes_all)}: horizon x the shipped steps / "
            "step size x the shipped lr): " + ("; ".join(robust) + ". " if robust else "no verdict holds anywhere. "))
    if quiet and robust:
        text += f"No verdict holds {'' if one else 'on every axis '}in {_names(quiet)}. "
    if one:
        text += "Whether a verdict flips with the horizon or the step size is not tested (one axis: run the default profile). "
    else:
        text += ("Verdicts that flip between axes: " + "; ".join(flips) + ". ") if flips else \
            "No verdict flips between axes. "
    if unposed:
        text += (f"The reference's own gain over uniform is not significant in {_names(unposed)}: no share there, "
                 "and no 'at least half' verdict. ")
    seeds = sorted(set(prof["seeds"]))
    text += (f"(Seed-level tests over {'/'.join(map(str, seeds))} seeds, Benjamini-Hochberg q < {ALPHA} over the "
             f"{int(prof['q'].notna().sum())} designs' cells: '>= 50%' = one-sided t test of mean(d - 0.5 g) > 0, "
             "'below uniform' = two-sided t test of d; share = (policy - uniform) / (reference - uniform), reference = the best of the oracle, "
             "the best fixed arm (chosen on tuning seeds) and mixed, on each scenario's target.)")
    return text


def _cell(r) -> str:
    star = "*" if r.verdict == "half" else ("v" if r.verdict == "below" else "")
    if not np.isfinite(r.share):
        return f"no share{star and ' ' + star}"
    return f"{r.share:+.2f} [{r.share_low:+.2f}, {r.share_high:+.2f}]{star}"


def wide_table(prof: pd.DataFrame) -> pd.DataFrame:
    """(Scenario, axis) x policies: `share [95% Fieller interval]`, * where the cell captures
    at least half (q_half < ALPHA), v where it falls below uniform; first the target, the
    reference and its gap (with its t p-value)."""
    if prof.empty:
        return pd.DataFrame(columns=["scenario", "axis", "target", "reference", "gap"])
    policies = list(dict.fromkeys(prof["policy"]))
    rows = []
    for (scenario, h, lr), g in prof.groupby(["scenario", "horizon", "step_scale"], sort=False):
        row = {"scenario": scenario, "axis": axis_label(h, lr), "target": g["target"].iloc[0],
               "reference": g["reference"].iloc[0], "gap": f"{g['gap'].iloc[0]:+.3f} (p {g['gap_p'].iloc[0]:.2g})"}
        cells = {r.policy: _cell(r) for r in g.itertuples()}
        rows.append({**row, **{p: cells.get(p, "") for p in policies}})
    return pd.DataFrame(rows)


def text_table(wide: pd.DataFrame) -> str:
    """The wide table as aligned text (what `hb stress` prints)."""
    cols = list(wide.columns)
    body = [[str(v) for v in row] for row in wide.itertuples(index=False)]
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(cols)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(cols), line(["-" * w for w in widths])] + [line(b) for b in body])


def heatmap_panels(prof: pd.DataFrame) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    """axis label -> (scenarios x policies shares, the same with True where the cell captures
    at least half): the heatmap's panels, one per axis (what `figures.share_panels` draws)."""
    panels = {}
    order = list(dict.fromkeys(prof["policy"]))
    scen = list(dict.fromkeys(prof["scenario"]))
    for (h, lr), g in prof.groupby(["horizon", "step_scale"], sort=False):
        share = g.pivot_table(index="scenario", columns="policy", values="share", sort=False, dropna=False)
        marks = g.assign(sig=g["verdict"] == "half").pivot_table(index="scenario", columns="policy", values="sig",
                                                                 sort=False, aggfunc="max")
        share = share.reindex(index=scen, columns=order)
        marks = marks.reindex(index=scen, columns=order).fillna(False).astype(bool)
        panels[f"horizon {int(h)}x, step size x{float(lr):g}"] = (share, marks)
    return panels


FIGURE_TITLE = "share of the best reference's gain over uniform (* >= 50%, BH q < 0.05)"


def write_page(prof: pd.DataFrame, out: str | Path, provenance: dict) -> dict[str, Path]:
    """DIR/profile.csv, DIR/profile.md, DIR/figures/share.png and DIR/index.html (the
    reading, the heatmap panels, the table, the provenance); returns their paths."""
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    files = {"csv": atomic_write(out / "profile.csv", prof.to_csv(index=False))}
    doc = Doc(out / "figures")
    doc.h(1, "hb stress: share of the best reachable reference's gain, on every axis")
    doc.p(reading(prof))
    if not prof.empty:
        doc.figure("share", figures.share_panels(heatmap_panels(prof), FIGURE_TITLE))
    doc.table(wide_table(prof), max_rows=400)
    doc.p("Every cell: share [95% Fieller interval over seeds] (no share where the reference's own gain over "
          "uniform is not significant), * where the one-sided seed-level t test of mean(d - 0.5 g) > 0 has "
          "Benjamini-Hochberg q < 0.05 (captures at least half), v where the paired t test of policy - uniform "
          "has q < 0.05 with a negative delta; all numbers, with the exact sign-flip p, in profile.csv.")
    doc.h(2, "Provenance")
    doc.pre(json.dumps(provenance, indent=1, default=str))
    files["markdown"] = atomic_write(out / "profile.md", "\n".join(doc.md))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape('hb stress')}</title>"
            f"<style>{CSS}</style></head><body>{doc.body_html()}</body></html>")
    files["index"] = atomic_write(out / "index.html", page)
    files.update({f"fig:{k}": v for k, v in doc.figs.items()})
    return files
