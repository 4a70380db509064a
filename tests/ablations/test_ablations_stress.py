"""`hb stress`: the grid of parts it runs, the share-of-gap profile against a hand
computation from the collected tables, resume, and its user errors. Stand-in scenarios
(the existing bernoulli/student envs, few steps) replace the shipped suite in-process."""
from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd
import pytest
import scipy.stats as sps

import hbsim.scenarios
from ablations import stress
from ablations.spec import SpecError, parse_spec
from ablations_testkit import TINY_ENV, hb
from hbsim.cli import main
from hbsim.contract import CELLS
from hbsim.records import read_meta
from hbsim.scenarios import Scenario
from reports import stress as profile

STAND_INS = {
    "tiny_b": Scenario(name="tiny_b", summary="bernoulli stand-in", target="heldout_tasks", seeds=3, steps=8,
                       env=dict(TINY_ENV)),
    "tiny_s": Scenario(name="tiny_s", summary="student stand-in", target="train", seeds=3, steps=6,
                       env={"kind": "student", "n_harnesses": 3, "n_tasks": 12, "n_heldout_tasks": 4}),
}
ARGS = ["--scenarios", "tiny_b,tiny_s", "--policies", "harnessbandit", "--seeds", "2", "--jobs", "1"]


@pytest.fixture
def stand_ins(monkeypatch):
    monkeypatch.setattr(hbsim.scenarios, "SCENARIOS", dict(STAND_INS))


@pytest.fixture
def ran(stand_ins, tmp_path, capsys):
    out = tmp_path / "st"
    assert main(["stress", *ARGS, "--out", str(out)]) == 0
    return out, capsys.readouterr().out


def test_grid_holds_policies_x_scenarios_x_seeds(ran):
    out, printed = ran
    metas = [read_meta(p) for p in sorted((out / CELLS).iterdir())]
    got = sorted((m["grid"]["sweep"]["part"], m["label"], m["seed"]) for m in metas)
    want = sorted((part, f"{label}[part={part}]", seed)
                  for part, target in (("tiny_b", "heldout_tasks"), ("tiny_s", "train"))
                  for label in ("uniform", "harnessbandit", f"oracle[target={target}]") for seed in (0, 1))
    assert got == want                                    # 2 scenarios x 3 policies x 2 seeds
    for m in metas:
        sc = STAND_INS[m["grid"]["sweep"]["part"]]
        assert m["config"]["env"]["kind"] == sc.env["kind"] and m["config"]["steps"] == sc.steps
    assert json.loads((out / ".hb-kind.json").read_text())["kind"] == "grid"
    assert json.loads((out / "grid.json").read_text())["name"] == "stress"
    assert "12 cells" in printed and "12 run" in printed and "CPU" in printed and "load average" in printed
    for name in ("index.html", "profile.csv", "profile.md", "figures/share.png"):
        assert (out / "stress" / name).stat().st_size > 0
    assert "share of the oracle" in (out / "stress" / "index.html").read_text()


def _hand_scores(out) -> pd.DataFrame:
    """Final scores by hand from the collected tables: the eval suites' mean reward at the
    last eval step; train: the mean true_<harness> of the last train row."""
    ev, tr = pd.read_parquet(out / "eval.parquet"), pd.read_parquet(out / "train.parquet")
    rows = []
    for (label, seed), g in ev.groupby(["policy", "seed"]):
        last = g[g["step"] == g["step"].max()]
        for suite, s in last.groupby("suite"):
            rows.append((label, seed, suite, s["reward"].mean()))
    for (label, seed), g in tr.groupby(["policy", "seed"]):
        row = g[g["step"] == g["step"].max()].iloc[0]
        rows.append((label, seed, "train", np.mean([row[f"true_h{i}"] for i in range(3)])))
    return pd.DataFrame(rows, columns=["policy", "seed", "suite", "score"])


def test_share_of_gap_matches_a_hand_computation(ran):
    out, _ = ran
    scores = _hand_scores(out)
    prof = pd.read_csv(out / "stress" / "profile.csv")
    assert sorted(zip(prof["scenario"], prof["policy"])) == [("tiny_b", "harnessbandit"), ("tiny_s", "harnessbandit")]
    for part, target in (("tiny_b", "heldout_tasks"), ("tiny_s", "train")):
        s = scores[scores["suite"] == target].set_index(["policy", "seed"])["score"]
        at = lambda label: np.array([s[(f"{label}[part={part}]", seed)] for seed in (0, 1)])  # noqa: E731
        p, u, o = at("harnessbandit"), at("uniform"), at(f"oracle[target={target}]")
        row = prof[prof["scenario"] == part].iloc[0]
        assert row["target"] == target and row["seeds"] == 2
        assert row["delta"] == pytest.approx((p - u).mean(), abs=1e-12)
        assert row["gap"] == pytest.approx((o - u).mean(), abs=1e-12)
        if (o - u).mean() > 0:
            assert row["share"] == pytest.approx((p - u).mean() / (o - u).mean(), abs=1e-12)
        d = p - u
        want_p = 1.0 if np.all(d == 0) else sps.ttest_1samp(d, 0.0).pvalue
        assert row["p"] == pytest.approx(want_p, abs=1e-9)
        # sign flip, 2 seeds: the 4 patterns; p = share with |sum| >= the observed one
        flips = [abs(a * d[0] + b * d[1]) for a in (1, -1) for b in (1, -1)]
        assert row["p_signflip"] == pytest.approx(np.mean([f >= abs(d.sum()) - 1e-9 * np.abs(d).sum() for f in flips])
                                                  if np.any(d) else 1.0)


def test_rerun_resumes_without_new_cells_and_a_different_spec_is_refused(ran, capsys):
    out, _ = ran
    before = {p.name: p.stat().st_mtime_ns for p in (out / CELLS).iterdir()}
    assert main(["stress", *ARGS, "--out", str(out)]) == 0
    assert "12 already done, 0 run" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in (out / CELLS).iterdir()} == before
    record = (out / "grid.json").read_text()
    other = [a if a != "2" else "3" for a in ARGS]                     # --seeds 3
    assert main(["stress", *other, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "another spec" in err and "seeds 2" in err and "seeds 3" in err
    assert (out / "grid.json").read_text() == record and len(list((out / CELLS).iterdir())) == 12
    assert "pass --force" in err
    # --force: the other spec's cells stay, this one's are added, the profile covers this spec only
    assert main(["stress", *other, "--out", str(out), "--force"]) == 0
    printed = capsys.readouterr().out
    assert "18 cells" in printed and "12 already done, 6 run, 0 failed" in printed   # seed 2 of 3 policies x 2 scenarios
    assert {p.name for p in (out / CELLS).iterdir()} >= set(before) and len(list((out / CELLS).iterdir())) == 18
    assert json.loads((out / "grid.json").read_text())["spec"]["raw"]["parts"][0]["seeds"] == 3
    shares = pd.read_csv(out / "stress" / "profile.csv")
    assert set(shares["seeds"]) == {3}


def test_hb_report_reports_one_part_of_the_stress_grid(ran, capsys):
    """A stress grid holds one environment per part: `hb report` without --part cannot pair
    across them and says so; with --part it reports that scenario alone, under the labels
    without the suffix, and its delta on the target is the profile's."""
    out, _ = ran
    assert main(["report", str(out), "--baseline", "uniform", "--resamples", "50"]) == 2
    err = capsys.readouterr().err
    assert "holds a grid of parts (['tiny_b', 'tiny_s'])" in err and "report one part with --part NAME" in err
    assert not (out / "report").exists()
    assert main(["report", str(out), "--part", "tiny_b", "--baseline", "uniform", "--resamples", "50"]) == 0
    capsys.readouterr()
    paired = pd.read_csv(out / "report-tiny_b" / "paired.csv")
    assert set(paired["candidate"]) == {"harnessbandit", "oracle[target=heldout_tasks]"}
    assert set(paired["baseline"]) == {"uniform"} and set(paired["n_seeds"]) == {2}
    prof = pd.read_csv(out / "stress" / "profile.csv").set_index(["scenario", "policy"])
    row = paired[(paired["suite"] == "heldout_tasks") & (paired["candidate"] == "harnessbandit")
                 & (paired["metric"] == "pass@1")].iloc[0]
    assert row["delta"] == pytest.approx(prof.loc[("tiny_b", "harnessbandit"), "delta"], abs=1e-12)
    assert json.loads((out / "report-tiny_b" / "config.json").read_text())["part"] == "tiny_b"
    for bad, word in (("nope", "allowed: one of ['tiny_b', 'tiny_s']"), ("../x", "--part='../x' is not allowed")):
        assert main(["report", str(out), "--part", bad, "--baseline", "uniform", "--resamples", "50"]) == 2
        assert word in capsys.readouterr().err
    assert not (out / "report-nope").exists()


@pytest.mark.parametrize("flag,value,word", [("--scenarios", "tiny_b,nope", "nope"),
                                             ("--policies", "harnessbandit,bogus", "bogus"),
                                             ("--seeds", "1", "--seeds")])
def test_bad_names_exit_2_with_one_line_before_any_folder(stand_ins, tmp_path, capsys, flag, value, word):
    args = dict(zip(ARGS[::2], ARGS[1::2]))
    args[flag] = value
    out = tmp_path / "never"
    assert main(["stress", *[x for kv in args.items() for x in kv], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and word in err
    assert not out.exists()


def test_policy_lists_always_hold_uniform_and_the_oracle(stand_ins):
    assert stress.chosen_policies("oracle,mixed,uniform", quick=False) == ["uniform", "mixed"]
    assert stress.chosen_policies(None, quick=True) == list(stress.QUICK_POLICIES)
    assert "oracle" not in stress.DEFAULT_POLICIES and "fixed" not in stress.DEFAULT_POLICIES
    raw = stress.grid_raw([STAND_INS["tiny_s"]], ["uniform", "fixed"], seeds=2, quick=False)
    part = raw["parts"][0]
    assert part["policies"][-1] == {"name": "oracle", "target": "train"}
    assert part["sweep"] == {"policy.arm": [0, 1, 2]}                # fixed: one cell per arm
    labels = {c.label for c in parse_spec(raw).cells()}
    assert labels == {"uniform[part=tiny_s]", "oracle[target=train][part=tiny_s]",
                      *(f"fixed[arm={a}][part=tiny_s]" for a in range(3))}


def test_every_shipped_scenario_plans_cells_that_resume():
    """A cell's id is its planned config's hash; the worker records the hash of that config
    resolved again, so resolution must be idempotent or a rerun refuses the finished cell
    (`kitchen`, on the roles knob's default `primary*2,...` written unexpanded, did)."""
    from hbsim.experiment import resolve_config
    from hbsim.records import config_hash
    raw = stress.grid_raw(list(hbsim.scenarios.SCENARIOS.values()), ["uniform"], seeds=2, quick=False)
    cells = parse_spec(raw).cells()
    assert len(cells) == 2 * 2 * len(hbsim.scenarios.SCENARIOS)
    assert [c.id for c in cells] == [config_hash(resolve_config(c.config)) for c in cells]


# -- grids of parts (ablations.spec) ------------------------------------------------------
def _parts_raw(**over):
    return {"name": "pp", "seeds": 2, "steps": 4, "policies": [{"name": "uniform"}],
            "parts": [{"name": "a", "env": dict(TINY_ENV)},
                      {"name": "b", "env": dict(TINY_ENV, n_harnesses=2), "steps": 5}], **over}


def test_parts_inherit_the_top_level_and_label_their_cells():
    spec = parse_spec(_parts_raw())
    cells = spec.cells()
    assert [(c.label, c.seed, c.config["steps"], c.config["env"]["n_harnesses"], c.sweep) for c in cells] == [
        ("uniform[part=a]", 0, 4, 3, {"part": "a"}), ("uniform[part=a]", 1, 4, 3, {"part": "a"}),
        ("uniform[part=b]", 0, 5, 2, {"part": "b"}), ("uniform[part=b]", 1, 5, 2, {"part": "b"})]
    # a part is the same grid as the plain grid of its keys, but for the label
    plain = parse_spec({"name": "x", "seeds": 2, "steps": 4, "env": dict(TINY_ENV),
                        "policies": [{"name": "uniform", "label": "uniform[part=a]"}]})
    assert [c.id for c in plain.cells()] == [c.id for c in cells[:2]]


@pytest.mark.parametrize("over,word", [
    ({"parts": []}, "'parts'"),
    ({"parts": [{"name": "a", "env": dict(TINY_ENV)}, {"name": "a", "env": dict(TINY_ENV)}]}, "named twice"),
    ({"parts": [{"name": "a[1]", "env": dict(TINY_ENV)}]}, "parts[0].name"),
    ({"parts": [{"name": "a", "env": dict(TINY_ENV), "plugins": []}]}, "of the whole grid"),
    ({"parts": [{"name": "a", "env": {"kind": "nope"}}]}, "parts[0] (a)"),
])
def test_bad_parts_are_one_line_spec_errors(over, word):
    with pytest.raises(SpecError) as exc:
        parse_spec(_parts_raw(**over))
    assert word in str(exc.value) and "\n" not in str(exc.value)


# -- the reading ------------------------------------------------------------------------
def test_reading_names_significant_winners_and_losers_only():
    rows = [("trap", "train", "learnability", -0.4, 0.001, 0.001), ("trap", "train", "harnessbandit", 0.7, 0.002, 0.001),
            ("trap", "train", "mixed", 0.9, 0.4, 0.001),          # big share, not significant: not named
            ("dead", "heldout_tasks", "transfer", 0.1, 0.001, 0.3)]  # significant but in between; gap n.s.
    prof = pd.DataFrame([{"scenario": s, "target": t, "policy": p, "share": sh, "p": pv, "gap_p": gp, "seeds": 6}
                         for s, t, p, sh, pv, gp in rows])
    prof["q"] = prof["p"]
    text = profile.reading(prof)
    assert text.startswith("In trap (train), harnessbandit captures >= 50% of the oracle's gain; "
                           "learnability falls below uniform.")
    assert "significantly in dead." in text and "not significant in dead" in text and "mixed" not in text
    assert "6 seeds" in text and "4 cells" in text


@pytest.mark.slow
def test_cli_smoke_on_the_shipped_suite(tmp_path):
    name = next(iter(hbsim.scenarios.SCENARIOS))
    out = tmp_path / "smoke"
    done = hb("stress", "--scenarios", name, "--policies", "harnessbandit", "--seeds", "2", "--jobs", "2",
              "--out", str(out), check=0)
    assert "6 cells" in done.stdout and "profile:" in done.stdout
    assert (out / "stress" / "index.html").exists() and os.path.getsize(out / "stress" / "profile.csv") > 0
