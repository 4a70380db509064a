"""The report's share-of-gap section (reports.gap over reports.readings.references)."""
import pandas as pd
import pytest

from reports.readings.summary import final_scores
from reports import gap, load
from reports.build import build_report
from reports_synth import make_synthetic

ORACLE = "oracle[target=heldout_harness]"
EFFECTS = {"uniform": 0.0, "hb": 0.4, ORACLE: 1.2}


def _frames(runs=None):
    ev, tr = make_synthetic(EFFECTS, n_seeds=4)
    return load.make_frames(ev, tr, runs=runs), ev


def test_gap_table_matches_the_final_scores_by_hand():
    frames, ev = _frames()
    table = gap.gap_table(frames)                   # no run.json: the oracle's target read from its label
    assert table["suite"].tolist() == ["heldout_harness"] * 2 and table["policy"].tolist() == ["hb", ORACLE]
    assert set(table["reference"]) == {ORACLE} and table["share"].iloc[1] == 1.0    # the reference: exactly 1
    scores = final_scores(frames.eval)
    scores = scores[scores.suite == "heldout_harness"].pivot(index="seed", columns="policy", values="score")
    want = ((scores["hb"] - scores["uniform"]).mean()
            / (scores["oracle[target=heldout_harness]"] - scores["uniform"]).mean())
    assert table["share"].iloc[0] == pytest.approx(want, rel=1e-12)
    assert table["delta"].iloc[0] == pytest.approx((scores["hb"] - scores["uniform"]).mean(), rel=1e-12)


def test_gap_table_reads_the_target_from_run_json():
    ev, _ = make_synthetic(EFFECTS, n_seeds=4)
    runs = {rid: {"run_id": rid, "policy": pol.split("[")[0], "label": pol, "seed": int(seed),
                  "config": {"policy": {"name": pol.split("[")[0], "target": "heldout_tasks"}}}
            for rid, pol, seed in ev[["run_id", "policy", "seed"]].drop_duplicates().itertuples(index=False)}
    table = gap.gap_table(load.make_frames(ev, runs=runs))
    assert set(table["suite"]) == {"heldout_tasks"}                # run.json wins over the label


def test_report_has_the_section(tmp_path):
    frames, _ = _frames()
    result = build_report(frames, baseline="uniform", out=tmp_path, resamples=20)
    assert result.tables["gap"]["policy"].tolist() == ["hb", ORACLE]
    page = (tmp_path / "report.md").read_text()
    assert "## Share of the achievable gain" in page and "Fieller" in page
    # the share lines also sit on the first screen: in the headline, above its Source line
    first = page[: page.index("## Share of the achievable gain")]
    assert "share of the achievable gain = (policy - uniform)" in first
    assert first.index("share of the achievable gain =") < first.index("Source:")
    assert pd.read_csv(tmp_path / "gap.csv")["policy"].tolist() == ["hb", ORACLE]
    plain = build_report(make_synthetic({"uniform": 0.0, "hb": 0.4}, n_seeds=3), baseline="uniform",
                         out=tmp_path / "plain", resamples=20)
    plain_page = (tmp_path / "plain" / "report.md").read_text()
    assert plain.tables["gap"].empty and "Share of the achievable" not in plain_page
    assert "share of the achievable gain" not in plain_page
