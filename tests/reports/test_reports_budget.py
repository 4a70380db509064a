"""`hb report --budget`: designs compared at the largest cost milestone every run reached."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from hbsim.cli import main as hb_main
from policies.errors import UserError
from reports import budget, load

ENV = ["--set", "env.n_harnesses=3", "--set", "env.n_tasks=30", "--set", "env.n_heldout_tasks=6",
       "--set", "env.k_attempts=2", "--set", 'env.group_tokens="100,300,900"']


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    out = tmp_path_factory.mktemp("budget") / "sim"
    assert hb_main(["sim", "--env", "bernoulli", "--policy", "uniform", "--policy", "harnessbandit", "--seeds", "3",
                    "--steps", "12", "--eval-budget", "tokens:2000,8000,1e9", "--out", str(out), "--jobs", "1",
                    *ENV]) == 0
    return out


def test_step_rows_drop_budget_and_validation_rows():
    ev = pd.DataFrame({"suite": ["heldout_tasks", "validation", "heldout_tasks"],
                       "budget_unit": [None, None, "groups"], "reward": [1.0, 0.0, 0.5]})
    assert load.step_rows(ev)["reward"].tolist() == [1.0]


def test_frames_at_the_largest_common_milestone(sim):
    frames, info = budget.frames_at(sim, "tokens")
    assert info["at"] == 8000.0 and info["largest"]
    raw = pd.concat([pd.read_parquet(p) for p in sorted(sim.glob("*/*/eval.parquet"))], ignore_index=True)
    want = raw[(raw["budget_unit"] == "tokens") & (raw["budget_value"] == 8000.0)]
    assert len(frames.eval) == len(want) and frames.eval["reward"].sum() == pytest.approx(want["reward"].sum())
    # each run is read at the step where its tokens first reached 8000
    tr = pd.concat([pd.read_parquet(p) for p in sorted(sim.glob("*/*/train.parquet"))], ignore_index=True)
    for (pol, seed), g in tr.groupby(["policy", "seed"]):
        first = int(g["step"].to_numpy()[np.argmax(g["tokens"].cumsum().to_numpy() >= 8000)])
        assert set(frames.eval.loc[(frames.eval["policy"] == pol) & (frames.eval["seed"] == seed), "step"]) == {first}
    assert budget.frames_at(sim, "tokens", 2000)[1]["at"] == 2000.0
    with pytest.raises(UserError, match=r"^--at: got 1000000000.0, allowed: a tokens milestone every run reached"):
        budget.frames_at(sim, "tokens", 1e9)
    with pytest.raises(UserError, match=r"^--budget groups: no run of DIR was evaluated at a groups budget"):
        budget.frames_at(sim, "groups")


def test_ranking_lines_say_whether_the_order_holds(sim):
    frames, info = budget.frames_at(sim, "tokens")
    lines = budget.ranking_lines(load.read_dir(sim), frames, info)
    assert lines[0].startswith("equal cost: every run at its first evaluation with tokens >= 8000")
    suites = [ln for ln in lines if ln.startswith("  heldout")]
    assert len(suites) == 2 and all(ln.endswith((": holds", ": changes")) for ln in suites)


def test_cli_budget(sim, capsys):
    assert hb_main(["report", str(sim), "--baseline", "uniform", "--budget", "tokens", "--resamples", "50",
                    "--out", str(sim.parent / "rep")]) == 0
    assert "equal cost: every run at its first evaluation with tokens >= 8000" in capsys.readouterr().out
    assert hb_main(["report", str(sim), "--baseline", "uniform", "--at", "5", "--out", str(sim.parent / "r2")]) == 2
    assert capsys.readouterr().err.strip() == "error: --at 5: only allowed with --budget groups|tokens|seconds"
