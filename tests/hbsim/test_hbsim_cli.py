"""`hb sim` through subprocess, and the summary table."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from hbsim.contract.records import read_run
from reports.readings.summary import summarize, summary_table

SMALL = ["--set", "env.n_tasks=30", "--set", "env.n_heldout_tasks=4"]


def hb(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "hbsim.cli", "sim", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


@pytest.mark.slow
def test_sim_smoke_with_out(tmp_path):
    out = tmp_path / "runs"
    proc = hb("--env", "bernoulli", "--policy", "harnessbandit", "--policy", "uniform", "--seeds", "2",
              "--steps", "10", "--jobs", "1", "--out", str(out), *SMALL)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("policy") and "heldout_tasks (± 95% t-interval over seeds)" in lines[0] and "cum. regret" in lines[0]
    assert [line.split()[0] for line in lines[2:]] == ["harnessbandit", "uniform"]
    assert "4/4 runs" in proc.stderr and "done in" in proc.stderr
    for label in ("harnessbandit", "uniform"):
        for seed in (0, 1):
            res = read_run(out / label / f"seed{seed}")
            assert len(res.train) == 10 and res.meta["config"]["env"]["n_tasks"] == 30
            assert res.meta["seed"] == seed and res.meta["label"] == label
    # the same runs again: reused, not rerun (files untouched); the table is the same
    before = (out / "uniform" / "seed0" / "train.parquet").stat().st_mtime_ns
    again = hb("--policy", "uniform", "--seeds", "2", "--steps", "10", "--out", str(out), *SMALL)
    assert again.returncode == 0 and "0 runs" in again.stderr and "2 finished runs reused" in again.stderr
    assert again.stdout.splitlines()[2].split() == lines[3].split()
    assert (out / "uniform" / "seed0" / "train.parquet").stat().st_mtime_ns == before
    # a different run at the same place: refused before running, one line, exit 2, files kept
    other = hb("--policy", "harnessbandit", "--seeds", "1", "--steps", "10", "--out", str(out), *SMALL,
               "--set", "policy.tau=0.7")
    assert other.returncode == 2 and other.stderr.count("\n") == 1 and "already holds a different run" in other.stderr
    # other settings (steps) in the same folder: refused, naming --force
    steps = hb("--policy", "uniform", "--seeds", "1", "--steps", "11", "--out", str(out), *SMALL)
    assert steps.returncode == 2 and "another configuration" in steps.stderr and "--force" in steps.stderr
    assert (out / "uniform" / "seed0" / "train.parquet").stat().st_mtime_ns == before


@pytest.mark.slow
def test_sim_all_policies_parallel():
    proc = hb("--policy", "all", "--seeds", "2", "--steps", "8", "--jobs", "2", *SMALL)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.split("\n\n")[0].splitlines()[2:]          # the summary table, before the share block
    names = [line.split()[0] for line in table]
    from policies import POLICIES
    assert names == [*POLICIES, "best_fixed"]       # `fixed` runs give the best fixed arm in hindsight row
    assert "share of the achievable gain" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("args, needle", [
    (["--env", "nope"], "valid kinds"),
    (["--set", "env.lr=-1"], "lr=-1"),
])
def test_sim_bad_input_one_line_exit_2_subprocess(args, needle):
    proc = hb("--steps", "2", "--seeds", "1", *args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error:") and needle in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize("args, needle", [
    (["--set", "env.lrate=1"], "valid knobs"),
    (["--set", "env.group_size=1.5"], "group_size=1.5"),
    (["--set", "policy.tau=oops", "--policy", "harnessbandit"], "tau"),
    (["--set", "policy.zzz=1"], "zzz"),
    (["--set", "policy_seed=1"], "the run knobs --set takes here are steps, seeds"),   # a run knob hb sim does not take
    (["--policy", "bogus"], "valid policies"),
    (["--seeds", "0"], "--seeds=0"),
    (["--steps", "0"], "--steps=0"),
    (["--steps", "-3"], "steps=-3"),
    (["--steps", "abc"], "invalid int value"),
])
def test_sim_bad_input_in_process(args, needle, capsys, tmp_path):
    from hbsim.cli import main
    assert main(["sim", "--seeds", "1", "--steps", "2", "--out", str(tmp_path / "o"), *args]) == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.count("\n") == 1 and needle in err.err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_sim_knobs_listing():
    proc = hb("--env", "bernoulli", "--knobs")
    assert proc.returncode == 0
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    from hbsim.envs import ENVS
    assert names == list(ENVS["bernoulli"].knobs())


def test_summary_values_hand_computed():
    train = pd.DataFrame({"policy": ["a"] * 4, "seed": [0, 0, 1, 1], "regret": [0.1, 0.2, 0.3, 0.0],
                          "groups_generated": [12, 12, 24, 12], "groups_optimized": [8, 8, 8, 8],
                          "alloc_h0": [8, 0, 8, 8], "alloc_h1": [0, 8, 0, 0],
                          "arm": [0, 1, 0, 0], "oracle_arm": [0, 0, 1, 0]})
    ev = pd.DataFrame({"policy": ["a"] * 6, "seed": [0, 0, 0, 1, 1, 1], "step": [0, 2, 2, 2, 2, 2],
                       "suite": ["heldout_tasks"] * 3 + ["heldout_tasks", "heldout_harness", "heldout_harness"],
                       "reward": [0.0, 1.0, 0.5, 0.25, 1.0, 0.0]})
    s = summarize(train, ev).iloc[0]
    assert s.heldout_tasks_mean == pytest.approx((0.75 + 0.25) / 2)        # step-0 row ignored
    assert s.heldout_harness_mean == 0.5 and np.isnan(s.heldout_harness_t95_seeds)
    assert s.regret == pytest.approx(0.3) and s.gen_per_opt == pytest.approx(60 / 32)
    assert s.visits_h0 == 1.5 and s.visits_h1 == 0.5
    assert s.oracle_share == pytest.approx((0.5 + 0.5) / 2)
    table = summary_table(train, ev)
    header, _, line = table.splitlines()
    assert "oracle%" in header and "50%" in line and "1.88" in line and line.endswith("2/0")
    # t_{0.975, 1} = 12.706 * sd(0.75, 0.25) / sqrt(2) = 3.177; one seed on heldout_harness: no interval
    assert "0.500 ± 3.177" in line and line.count("±") == 2
