"""`hb calibrate`: A/A blocks through the real dispatcher, and the block p-values."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ablations import calibrate, runner


def test_aa_block_pairs_env_seeds_and_differs_only_in_policy_seed():
    tasks = calibrate.aa_tasks("bernoulli", "uniform", [3, 4], steps=5)
    assert [(t["config"]["policy"]["label"], t["config"]["seed"], t["config"]["policy_seed"]) for t in tasks] == [
        ("A", 3, 3), ("B", 3, 1_000_003), ("A", 4, 4), ("B", 4, 1_000_004)]
    evals = []
    runner.run_many(tasks, jobs=1, on_done=lambda answer: evals.append(answer["result"].eval)).check()
    ev = pd.concat(evals, ignore_index=True)
    assert set(ev["policy"]) == {"A", "B"} and set(ev["seed"]) == {3, 4}
    a = ev[ev["policy"] == "A"].sort_values(["seed", "suite", "task", "attempt"]).reset_index(drop=True)
    b = ev[ev["policy"] == "B"].sort_values(["seed", "suite", "task", "attempt"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(a[["seed", "suite", "task", "attempt"]], b[["seed", "suite", "task", "attempt"]])
    assert a["run_id"].iloc[0] != b["run_id"].iloc[0]
    rows = calibrate.block_pvalues(ev, resamples=50, rng=np.random.default_rng(0))
    tests = {(r["suite"], r["test"]) for r in rows}
    assert ("heldout_tasks", "p_seed") in tests and ("heldout_harness", "p_gee_seed") in tests
    seed_p = [r["p"] for r in rows if r["test"] == "p_seed"]
    assert all(p in (0.5, 1.0) for p in seed_p)  # 2 seeds: exact sign-flip p is 2/4 or 1


def test_skewed_block_rejects_and_says_b_trails():
    """--asymmetric: equal means, skewed run effects; the fpr table says which way the rejections go."""
    pv = pd.DataFrame({"suite": "s", "metric": "pass@1", "test": "p_seed", "p": [0.01, 0.02, 0.5, 0.9],
                       "delta": [-0.02, -0.01, 0.05, -0.01]})
    t = calibrate.fpr_table(pv, 0.05).set_index("test")
    assert t.loc["p_seed", "rejections"] == 2 and t.loc["p_seed", "b_trails"] == 1.0


def test_fpr_table_counts_rejections():
    pv = pd.DataFrame({"suite": "s", "metric": "pass@1", "test": ["p_seed"] * 4 + ["p_task_sign"] * 4,
                       "p": [0.01, 0.2, 0.5, 0.9, 0.01, 0.02, 0.03, 0.9]})
    t = calibrate.fpr_table(pv, 0.05).set_index("test")
    assert (t.loc["p_seed", "rejections"], t.loc["p_task_sign", "rejections"]) == (1, 3)
    assert t.loc["p_task_sign", "fpr"] == 0.75 and t.loc["p_seed", "fpr_low"] < 0.25 < t.loc["p_seed", "fpr_high"]


@pytest.mark.cli
@pytest.mark.slow
def test_calibrate_cli_smoke_and_bad_argument():
    cmd = [sys.executable, "-m", "hbsim.cli", "calibrate", "--blocks", "2", "--seeds", "2", "--steps", "3",
           "--resamples", "20"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "A/A calibration: uniform vs uniform" in res.stdout
    assert "heldout_tasks    pass@1   p_seed                    0/2" in res.stdout
    assert "8/8 runs" in res.stderr and "\r" not in res.stderr
    bad = subprocess.run(cmd[:4] + ["--seeds", "1"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --seeds=1 is not allowed: expected an integer in [2, 10000]"


@pytest.mark.cli
@pytest.mark.parametrize("flag,value", [("--env", "nope"), ("--policy", "nope"), ("--alpha", "1.5"),
                                        ("--asymmetric", "0.7")])
def test_calibrate_rejects_bad_names(flag, value, capsys):
    from hbsim.cli import main

    assert main(["calibrate", flag, value]) == 2
    err = capsys.readouterr().err
    want = f"error: {flag}={value!r}" if flag in ("--env", "--policy") else f"error: {flag}={value}"
    assert err.startswith(want) and err.count("\n") == 1
