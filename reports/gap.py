"""The report's "share of the achievable gain" section: per policy and eval suite,
(policy - uniform) / (reference - uniform) with Fieller's interval, beside the raw delta --
where the runs include `uniform` and a reference for the suite (the best of those run: the
`oracle` aimed at it, knob `target`, the best fixed arm where there are `fixed` runs, `mixed`;
`train`: the training objective, from the synthetic train table). The numbers
are `reports.readings.references` (the one implementation, also behind the `hb sim` summary); this
module only reads the data contract (final eval rows, run.json's policy name and knobs)
and renders the table.
"""
from __future__ import annotations

import pandas as pd

from reports.readings import references
from reports.readings.summary import final_scores


def gap_table(frames, scores: pd.DataFrame | None = None, train: pd.DataFrame | None = None) -> pd.DataFrame:
    """`references.share_of_gap` of a report's `load.Frames` (labels' knobs from run.json,
    else from the labels); empty when no suite has both references. A budget report
    (`reports.budget`) passes what it read at the milestone: ``scores`` (policy, seed, suite,
    score: `budget.run_scores` of its cells) and ``train`` (`budget.train_at`: one row per run
    at the milestone) instead of the final evaluation and the last train step."""
    scores = final_scores(frames.eval) if scores is None else scores
    train = frames.train if train is None else train
    both = pd.concat([references.train_scores(train), scores], ignore_index=True)
    runs = (references.run_table(frames.runs.values()) if frames.runs
            else references.runs_from_labels(scores["policy"]))
    return references.share_of_gap(both, runs)


def headline(doc, result) -> None:
    """The share lines on the report's first screen, under the compact table (nothing
    without the references; the full table is `section`'s)."""
    table = result.tables.get("gap")
    if table is not None and not table.empty:
        doc.pre("\n".join(references.share_lines(table)))


def section(doc, result) -> None:
    """The section of `reports.render.write` (nothing without the references)."""
    table = result.tables.get("gap")
    if table is None or table.empty:
        return
    with doc.details("Share of the achievable gain (the best reference run)", 2):
        _body(doc, table, result.config.get("budget"))


def _body(doc, table, budget: dict | None = None) -> None:
    when = ("final evaluation" if not budget else
            f"at exactly {budget['unit']} = {budget['at']:g} (the budget milestone; train target: true training "
            "success interpolated there)")
    doc.p(f"share = mean over seeds of (policy - uniform) / mean of (reference - uniform), {when}, paired "
          "by seed, the reference being the best reachable one of the suite (of the `oracle` run aimed at it, knob "
          "target, the best fixed arm and `mixed`, those that were run: the largest mean; real runs have no "
          "oracle); interval: Fieller's 95% interval of that ratio "
          "of means over seeds; no share where the reference's own gap over uniform is not significant; delta: "
          "mean paired difference against uniform with its 95% t half-width. 1 = what the best reference gains.")
    doc.pre("\n".join(references.share_lines(table)))
    doc.table(table)
