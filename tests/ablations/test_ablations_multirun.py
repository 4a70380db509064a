"""The one multi-run path (ablations.runner.run_many) under `hb sim`, `hb validity --study`
and `hb calibrate`: --jobs 2 equals --jobs 1, stale temporaries of killed runs are removed
and never read, a partial `hb sim --out` resumes with only the missing runs, and every
multi-run command hands its runs to the runner."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest
from pandas.testing import assert_frame_equal

import hbsim
from ablations import calibrate, runner, worker
from hbsim.cli import main as hb_main
from hbsim.contract.records import read_run
from policies import make

SMALL = ["--set", "env.n_tasks=30", "--set", "env.n_heldout_tasks=4"]
SIM = ["sim", "--env", "drifting", "--policy", "uniform", "--policy", "harnessbandit", "--seeds", "3",
       "--steps", "8", "--eval-every", "4", *SMALL]
STUDY = ('steps = 6\nseeds = 2\ncounterfactual = 2\nenvs = ["student"]\n[env]\nn_tasks = 30\n'
         'n_heldout_tasks = 10\n[[policies]]\nname = "harnessbandit"\nwarmup_rounds = 1\n')
RUN_DIRS = [f"{label}/seed{s}" for label in ("uniform", "harnessbandit") for s in range(3)]


def hb_in(capsys, *args, check=0):
    code = hb_main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == check, (code, out, err)
    return out, err


def frames(root, rel):
    res = read_run(root / rel)
    drop = lambda df: df[[c for c in df.columns if not c.startswith("seconds_")]]  # noqa: E731 - wall clock
    return drop(res.train), res.eval


@pytest.fixture
def executed(monkeypatch):
    """The ids of the tasks the (in-process, --jobs 1) runner executes."""
    ids = []
    real = worker.execute

    def spy(task):
        ids.append(task["id"])
        return real(task)

    monkeypatch.setattr(worker, "execute", spy)
    return ids


@pytest.mark.slow  # --jobs 2 forks worker processes
def test_sim_jobs_2_equals_jobs_1_bit_for_bit(tmp_path, capsys):
    out1, _ = hb_in(capsys, *SIM, "--jobs", 1, "--out", tmp_path / "j1")
    out2, err2 = hb_in(capsys, *SIM, "--jobs", 2, "--out", tmp_path / "j2")
    assert out1 == out2 and "on 2 worker(s)" in err2 and "6/6 runs" in err2
    for rel in RUN_DIRS:
        for a, b in zip(frames(tmp_path / "j1", rel), frames(tmp_path / "j2", rel)):
            assert_frame_equal(a, b, check_exact=True)
    no_out, _ = hb_in(capsys, *SIM, "--jobs", 2)       # results in memory: the same table
    assert no_out == out1


def test_sim_resumes_only_the_missing_runs(tmp_path, capsys, executed):
    out = tmp_path / "sim"
    table, _ = hb_in(capsys, *SIM, "--jobs", 1, "--out", out)
    assert sorted(executed) == sorted(RUN_DIRS)
    kept = {rel: (out / rel / "train.parquet").stat().st_mtime_ns for rel in RUN_DIRS}
    shutil.rmtree(out / "uniform" / "seed1")                   # a partial folder: two runs missing
    shutil.rmtree(out / "harnessbandit" / "seed2")
    executed.clear()
    again, err = hb_in(capsys, *SIM, "--jobs", 1, "--out", out)
    assert sorted(executed) == ["harnessbandit/seed2", "uniform/seed1"]
    assert "hb sim: 2 runs" in err and "4 finished runs reused" in err and "6/6 runs" in err
    assert again == table
    assert {rel: t for rel, t in kept.items() if rel not in executed} == {
        rel: (out / rel / "train.parquet").stat().st_mtime_ns for rel in RUN_DIRS if rel not in executed}


def test_stale_temporary_of_a_killed_run_is_removed_and_never_read(tmp_path, capsys):
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    root = tmp_path / "runs"
    args = ["validity", root, "--study", study, "--min-step", "0", "--resamples", "50", "--jobs", 1]
    first, _ = hb_in(capsys, *args)
    line = [ln for ln in first.splitlines() if ln.startswith("student  harnessbandit  L ")][0]
    assert line.split()[-1] == "2"                                           # seeds
    # a run killed after writing its files, before the rename: a complete-looking hidden copy
    # (of seed 0, as seed 5) next to the real runs, as write_dir_atomic and write_run name them
    label = root / "student" / "harnessbandit"
    for stale in (label / ".tmp-seed5-4242", label / ".seed5.tmp-abc123"):
        shutil.copytree(label / "seed0", stale)
        cf = pd.read_parquet(stale / "counterfactual.parquet")
        cf.assign(seed=5).to_parquet(stale / "counterfactual.parquet", index=False)
    again, err = hb_in(capsys, *args)
    assert "0 of 2 runs to do" in err
    assert sorted(p.name for p in label.iterdir()) == ["seed0", "seed1"]   # both temporaries removed
    assert again == first                                                  # and nothing of them read


def test_sim_validity_and_calibrate_hand_their_runs_to_the_runner(tmp_path, capsys, monkeypatch):
    calls = []
    real = runner.run_many

    def spy(tasks, **kw):
        calls.append((len(tasks), sum(1 for t in tasks if t.get("dir")), kw["jobs"], kw["backend"]))
        return real(tasks, **kw)

    monkeypatch.setattr(runner, "run_many", spy)
    hb_in(capsys, *SIM, "--jobs", 1)
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    hb_in(capsys, "validity", tmp_path / "runs", "--study", study, "--min-step", "0", "--resamples", "20",
          "--jobs", 1)
    out, _ = hb_in(capsys, "calibrate", "--blocks", 2, "--seeds", 2, "--steps", 3, "--resamples", 20, "--jobs", 1)
    # sim: 2 policies x 3 seeds in memory; the study: 2 seeds into DIR; calibrate: 2 blocks x 2 seeds x 2 arms
    assert calls == [(6, 0, 1, "local"), (2, 2, 1, "local"), (8, 0, 1, "local")]
    assert "p_seed                    0/2" in out


def test_calibrate_runs_equal_the_hand_built_a_b_arms():
    """The policy_seed run key reproduces `make(policy, seed=policy_seed)` on env seed s."""
    task = [t for t in calibrate.aa_tasks("bernoulli", "uniform", [3], 6) if t["config"]["policy"]["label"] == "B"][0]
    via_runner = hbsim.run_config(task["config"]).eval
    adapter = hbsim.make_env("bernoulli", seed=3)
    by_hand = hbsim.run(make("uniform", n_arms=len(adapter.harnesses), seed=1_000_003), adapter, 6, label="B",
                        seed=3).eval
    cols = [c for c in by_hand.columns if c != "run_id"]
    assert_frame_equal(via_runner[cols], by_hand[cols], check_exact=True)
    same_seed = hbsim.run_config({**task["config"], "policy_seed": 3}).eval     # arm A's policy seed
    assert not via_runner[["harness", "reward"]].equals(same_seed[["harness", "reward"]])


def test_failed_run_raises_with_its_traceback_and_keeps_the_others(tmp_path, monkeypatch):
    real = worker.execute

    def sometimes(task):
        if task["id"].endswith("seed1"):
            return worker.failure(task, "RuntimeError: planted", "Traceback ...\nRuntimeError: planted\n")
        return real(task)

    monkeypatch.setattr(worker, "execute", sometimes)
    cfgs = [hbsim.resolve_config({"env": {"kind": "bernoulli", "n_tasks": 12, "n_heldout_tasks": 4},
                                  "policy": {"name": "uniform"}, "seed": s, "steps": 3}) for s in range(3)]
    tasks = [{"id": f"uniform/seed{c['seed']}", "config": c, "dir": str(tmp_path / f"seed{c['seed']}")}
             for c in cfgs]
    report = runner.run_many(tasks, jobs=1)
    assert (report.total, report.ran, [a["id"] for a in report.failed]) == (3, 3, ["uniform/seed1"])
    with pytest.raises(RuntimeError, match=r"1 of 3 runs failed \(uniform/seed1\)(.|\n)*RuntimeError: planted"):
        report.check()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seed0", "seed2"]
    assert runner.pending(tasks) == [tasks[1]]
