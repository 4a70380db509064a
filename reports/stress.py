"""The `hb stress` profile: how much of the achievable gain each policy captures in each
scenario, from the collected tables of a grid of parts (one part per scenario,
`ablations.stress`). Nothing here runs anything.

Per scenario (part) and its declared primary target (train | heldout_tasks |
heldout_harness), for every policy: `hbsim.references.share_of_gap` (the one
implementation: share = mean_s (P_s - U_s) / mean_s (O_s - U_s) with its seed-bootstrap
interval, the raw delta with its paired t half-width), plus the paired seed-level tests of
P_s - U_s against 0 (`reports.stats.t_test_p`, the cell's test, and the exact sign-flip
`reports.stats.sign_flip_test`) and the Benjamini-Hochberg q of the t p-values over all
cells of the profile (`reports.stats.adjust`). The oracle's own gap O_s - U_s gets the
same t test (`gap_p`): a scenario whose gap is not significant poses no problem at that
seed count.

The reading (`reading`) names, per scenario, the policies with q < ALPHA whose share is
>= 0.5 ("capture >= 50% of the gap") or <= 0 ("fall below uniform"); the rest of the
scenarios are listed as having no significant difference from uniform.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hbsim.atomic import atomic_write
from hbsim.references import FIXED, best_fixed, run_table, share_of_gap, train_scores
from hbsim.summary import final_scores
from reports import figures
from reports.page import CSS, Doc
from reports.stats import adjust, sign_flip_test, t_test_p

ALPHA = 0.05
SIGN_FLIP_RESAMPLES = 10_000
#: the columns of `profile`
COLUMNS = ["scenario", "target", "policy", "seeds", "delta", "delta_t95", "gap", "gap_p", "share", "share_lo",
           "share_hi", "p", "p_signflip", "q"]


def part_suffix(part: str) -> str:
    """The label suffix of a part's cells (ablations.spec)."""
    return f"[part={part}]"


def _of_part(frame: pd.DataFrame, column: str, part: str) -> pd.DataFrame:
    """The rows of `frame` whose `column` label ends in the part's suffix, the suffix removed."""
    suffix = part_suffix(part)
    mine = frame[frame[column].astype(str).str.endswith(suffix)].copy()
    mine[column] = mine[column].astype(str).str[: -len(suffix)]
    return mine


def _strip(labels: pd.Series) -> pd.Series:
    """Labels without their part suffix."""
    return labels.astype(str).str.replace(r"\[part=[^\]]*\]$", "", regex=True)


def scores_of(train: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Final scores per (policy label, seed, suite): eval suites and the train target."""
    return pd.concat([final_scores(evals)[["policy", "seed", "suite", "score"]], train_scores(train)],
                     ignore_index=True)


def profile(train: pd.DataFrame, evals: pd.DataFrame, metas: list[dict], targets: dict[str, str]) -> pd.DataFrame:
    """One row per (scenario, policy) on the scenario's target (`targets`: part -> target),
    columns COLUMNS (module docstring); `fixed` runs count only as `best_fixed`. Scenarios
    without uniform and oracle runs are left out."""
    scores, runs = scores_of(train, evals), run_table(metas)
    rows = []
    for part, target in targets.items():
        mine, mine_runs = _of_part(scores, "policy", part), _of_part(runs, "label", part)
        table = share_of_gap(mine, mine_runs)
        fixed = mine_runs[mine_runs["name"] == FIXED]["label"]        # each arm: in best_fixed
        table = table[(table["suite"] == target) & ~table["policy"].isin(fixed)]
        if table.empty:
            continue
        mine = pd.concat([mine, best_fixed(mine, mine_runs)[mine.columns]], ignore_index=True)
        wide = mine[mine["suite"] == target].pivot_table(index="seed", columns="policy", values="score")
        uni, orc = table["uniform"].iloc[0], table["oracle"].iloc[0]
        g = (wide[orc] - wide[uni]).dropna().to_numpy()
        for r in table.itertuples():
            d = (wide[r.policy] - wide[uni]).dropna().to_numpy()
            rows.append({"scenario": part, "target": target, "policy": r.policy, "seeds": r.seeds,
                         "delta": r.delta, "delta_t95": r.delta_t95, "gap": r.gap, "gap_p": t_test_p(g),
                         "share": r.share, "share_lo": r.share_lo, "share_hi": r.share_hi, "p": t_test_p(d),
                         "p_signflip": sign_flip_test(d, resamples=SIGN_FLIP_RESAMPLES,
                                                      rng=np.random.default_rng(0))})
    out = pd.DataFrame(rows, columns=COLUMNS)
    order = {label: i for i, label in enumerate(dict.fromkeys(_strip(runs["label"])))}   # the runs' order
    out = out.sort_values("policy", key=lambda col: col.map(lambda v: order.get(v, len(order))), kind="stable")
    out = out.sort_values("scenario", key=lambda col: col.map(list(targets).index), kind="stable")
    out = out.reset_index(drop=True)
    out["q"] = adjust(out["p"].to_numpy(), "fdr_bh") if len(out) else []
    return out


def _names(policies) -> str:
    policies = list(policies)
    return policies[0] if len(policies) == 1 else ", ".join(policies[:-1]) + " and " + policies[-1]


def reading(prof: pd.DataFrame) -> str:
    """The one-paragraph reading of a profile (module docstring)."""
    if prof.empty:
        return "No scenario has both a uniform and an oracle run: nothing to profile."
    sentences, quiet, unposed = [], [], []
    for scenario, rows in prof.groupby("scenario", sort=False):
        sig = rows[rows["q"] < ALPHA]
        win = sig[sig["share"] >= 0.5]["policy"].tolist()
        lose = sig[sig["share"] <= 0]["policy"].tolist()
        if not (rows["gap_p"].iloc[0] < ALPHA):
            unposed.append(scenario)
        parts = []
        if win:
            parts.append(f"{_names(win)} capture{'s' if len(win) == 1 else ''} >= 50% of the oracle's gain")
        if lose:
            parts.append(f"{_names(lose)} fall{'s' if len(lose) == 1 else ''} below uniform")
        if parts:
            sentences.append(f"in {scenario} ({rows['target'].iloc[0]}), " + "; ".join(parts))
        else:
            quiet.append(scenario)
    text = "; ".join(sentences)
    text = (text[0].upper() + text[1:] + ". ") if text else "No policy differs significantly from uniform anywhere. "
    if quiet and sentences:
        text += f"No policy captures >= 50% or falls below uniform significantly in {_names(quiet)}. "
    if unposed:
        text += (f"The oracle's own gain over uniform is not significant in {_names(unposed)}, so there the "
                 "profile says little. ")
    seeds = sorted(set(prof["seeds"]))
    text += (f"(Paired t-test over {'/'.join(map(str, seeds))} seeds, Benjamini-Hochberg q < {ALPHA} over the "
             f"{len(prof)} cells; share = (policy - uniform) / (oracle - uniform) on each scenario's target.)")
    return text


def _cell(r) -> str:
    if not np.isfinite(r.share):
        return "-"
    ci = f" [{r.share_lo:+.2f}, {r.share_hi:+.2f}]" if np.isfinite(r.share_lo) else " [unbounded]"
    return f"{r.share:+.2f}{ci}{'*' if r.q < ALPHA else ''}"


def wide_table(prof: pd.DataFrame) -> pd.DataFrame:
    """Scenarios x policies: `share [95% interval]`, * where q < ALPHA; first the scenario's
    target and the oracle's gap (with its t p-value)."""
    if prof.empty:
        return pd.DataFrame(columns=["scenario", "target", "oracle gap"])
    policies = list(dict.fromkeys(prof["policy"]))
    rows = []
    for scenario, g in prof.groupby("scenario", sort=False):
        row = {"scenario": scenario, "target": g["target"].iloc[0],
               "oracle gap": f"{g['gap'].iloc[0]:+.3f} (p {g['gap_p'].iloc[0]:.2g})"}
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


def write_page(prof: pd.DataFrame, out: str | Path, provenance: dict) -> dict[str, Path]:
    """DIR/profile.csv, DIR/profile.md, DIR/figures/share.png and DIR/index.html (the
    reading, the heatmap, the table, the provenance); returns their paths."""
    out = Path(out)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    files = {"csv": atomic_write(out / "profile.csv", prof.to_csv(index=False))}
    doc = Doc(out / "figures")
    doc.h(1, "hb stress: share of the oracle's gap")
    doc.p(reading(prof))
    if not prof.empty:
        share = prof.pivot_table(index="scenario", columns="policy", values="share", sort=False)
        marks = prof.assign(sig=prof["q"] < ALPHA).pivot_table(index="scenario", columns="policy",
                                                                values="sig", sort=False)
        order = list(dict.fromkeys(prof["policy"]))
        doc.figure("share", figures.share_heatmap(share[order], marks[order].fillna(False).astype(bool),
                                                  "share of the oracle's gap over uniform (* BH q < 0.05)"))
    doc.table(wide_table(prof), max_rows=200)
    doc.p("Every cell: share [95% seed-bootstrap interval], * where the paired t-test of policy - uniform over "
          "seeds has Benjamini-Hochberg q < 0.05; all numbers, with the exact sign-flip p, in profile.csv.")
    doc.h(2, "Provenance")
    doc.pre(json.dumps(provenance, indent=1, default=str))
    files["markdown"] = atomic_write(out / "profile.md", "\n".join(doc.md))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape('hb stress')}</title>"
            f"<style>{CSS}</style></head><body>{doc.body_html()}</body></html>")
    files["index"] = atomic_write(out / "index.html", page)
    files.update({f"fig:{k}": v for k, v in doc.figs.items()})
    return files
