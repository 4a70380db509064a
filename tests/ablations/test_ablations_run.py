"""Running grids through the CLI: determinism across --jobs, failure isolation, status,
collect, plan, resume after a file change, and the grid-name guard."""
from __future__ import annotations

import json

import pandas as pd
import pytest
from ablations_testkit import hb, without_wall_clock, write_grid
from pandas.testing import assert_frame_equal

from ablations import store
from ablations.spec import load_spec
from hbsim.cli import main as hb_main
from hbsim.contract.records import done_ids, load_cells

pytestmark = pytest.mark.slow  # every test here spawns processes (make test-fast skips them)


def hb_in(capsys, *args, check=0):
    """`hb ARGS` in this process (no interpreter start); returns (stdout, stderr)."""
    code = hb_main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert code == check, (code, out, err)
    return out, err

POLICIES = [{"name": "mixed", "label": "mixed-2", "arms": [0, 1]}, {"name": "uniform"},
            {"name": "harnessbandit", "warmup_rounds": 1}]
SWEEP = {"env.drift": [0.0, 0.03], "policy.window": [4, 8]}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """The same grid run with --jobs 1 and --jobs 2 (module-scoped: used by several tests)."""
    tmp = tmp_path_factory.mktemp("runs")
    grid = write_grid(tmp / "grid.toml", name="det", steps=8, seeds=2, eval_every=4,
                      policies=POLICIES, sweep=SWEEP)
    procs = {jobs: hb("grid", "run", grid, "--out", tmp / f"j{jobs}", "--jobs", jobs, check=0) for jobs in (1, 2)}
    return tmp, grid, procs


def test_jobs_1_and_2_give_identical_tables(two_runs):
    tmp, grid, procs = two_runs
    cells = load_spec(grid).cells()
    assert len(cells) == (2 + 2 + 4) * 2
    for jobs in (1, 2):
        assert done_ids(tmp / f"j{jobs}") == {c.id for c in cells}
        assert f"{len(cells)}/{len(cells)} cells" in procs[jobs].stderr        # the progress bar
        assert "cells/s" in procs[jobs].stderr and "ETA" in procs[jobs].stderr
        assert f"{len(cells)} cells, 0 already done, {len(cells)} run, 0 failed" in procs[jobs].stdout
        # the `hb sim` summary table, one row per policy label
        summary = procs[jobs].stdout.split("results in")[1].split("\n\n")[0].splitlines()[1:]
        assert summary[0].split()[:2] == ["policy", "seeds"]
        assert {line.split()[0] for line in summary[2:]} == {c.label for c in cells}
        # then the share block: no oracle was run, so the reference is the best of what was (mixed-2 here)
        assert "share of the achievable gain" in procs[jobs].stdout and "reference = 'mixed-2" in procs[jobs].stdout
    t1, e1 = load_cells(tmp / "j1")
    t2, e2 = load_cells(tmp / "j2")
    assert_frame_equal(without_wall_clock(t1), without_wall_clock(t2), check_exact=True)
    assert_frame_equal(e1, e2, check_exact=True)
    # rows: cells in id order, steps in order within a cell; sweep values as columns
    assert list(t1["run_id"]) == sorted(t1["run_id"])
    assert (t1.groupby("run_id")["step"].apply(lambda s: list(s) == sorted(s))).all()
    assert list(t1.columns[-2:]) == list(e1.columns[-2:]) == ["env.drift", "policy.window"]
    hb_rows = t1[t1["policy"] == "harnessbandit[warmup_rounds=1][drift=0.03,window=8]"]
    assert set(hb_rows["policy.window"]) == {8} and set(hb_rows["env.drift"]) == {0.03}
    assert t1.loc[t1["policy"] == "uniform[drift=0.0]", "policy.window"].isna().all()
    assert set(t1["policy"]) == {c.label for c in cells}
    assert set(e1["step"]) == {0, 4, 8}                           # eval_every = 4 (+ the start)


def test_cell_directories_hold_a_complete_run_record(two_runs):
    tmp, grid, _ = two_runs
    cell = load_spec(grid).cells()[0]
    d = tmp / "j2" / "cells" / cell.id
    assert sorted(p.name for p in d.iterdir()) == ["eval.parquet", "groups.parquet", "log.txt", "run.json", "train.parquet"]
    meta = json.loads((d / "run.json").read_text())
    assert meta["config"] == cell.config
    assert meta["config_hash"] == cell.id == meta["run_id"]
    assert meta["grid"] == {"name": "det", "cell_id": cell.id, "sweep": cell.sweep, "label": cell.label,
                            "seed": cell.seed}
    assert json.loads((tmp / "j2" / "grid.json").read_text())["name"] == "det"
    assert not list((tmp / "j2" / "cells").glob(".tmp-*"))


def test_collect_writes_the_same_frames_as_load_and_status_and_plan(two_runs, capsys):
    tmp, grid, _ = two_runs
    root = tmp / "j1"
    assert "wrote" in hb("grid", "collect", root, check=0).stdout     # one real subprocess
    train, evals = load_cells(root)
    assert_frame_equal(pd.read_parquet(root / "train.parquet"), train, check_exact=True)
    assert_frame_equal(pd.read_parquet(root / "eval.parquet"), evals, check_exact=True)
    status, _ = hb_in(capsys, "grid", "status", root)
    assert "16 cells planned" in status and "done:    16" in status and "missing: 0" in status
    plan, _ = hb_in(capsys, "grid", "plan", grid, "--out", root)
    assert "16 cells" in plan and plan.count(" done") == 16
    assert "harnessbandit[warmup_rounds=1][drift=0.0,window=4]" in plan
    rerun, _ = hb_in(capsys, "grid", "run", grid, "--out", root, "--jobs", 2)
    assert "16 already done, 0 run" in rerun


def test_failure_is_isolated_logged_and_retried(tmp_path):
    grid = write_grid(tmp_path / "g.toml", name="fail", steps=5, seeds=3, plugins=["ablations_fixture_plugin"],
                      policies=[{"name": "explode", "fail_seed": 1}, {"name": "uniform"}])
    out = tmp_path / "out"
    proc = hb("grid", "run", grid, "--out", out, "--jobs", "2")
    assert proc.returncode == 1, proc.stderr
    # (the plugin is imported only in the subprocesses, so POLICIES here stays untouched)
    failed = store.failed_ids(out)
    assert len(failed) == 1 and len(done_ids(out)) == 5
    (bad,) = failed
    log = store.failure_log(out, bad).read_text()
    assert "Traceback" in log and "RuntimeError: planted failure at step 2 for seed 1" in log
    assert f"FAILED {bad}: RuntimeError: planted failure at step 2 for seed 1" in proc.stdout
    status = hb("grid", "status", out, check=0).stdout     # the plugin stays out of this process
    assert "failed:  1" in status and f"{bad}: RuntimeError: planted failure" in status
    assert str(store.failure_log(out, bad)) in status
    assert not (out / "cells" / bad).exists()
    # a rerun retries only the failed cell (and it fails again, deterministically)
    again = hb("grid", "run", grid, "--out", out, "--jobs", "1")
    assert again.returncode == 1 and "5 already done, 1 run, 1 failed" in again.stdout


def test_a_full_disk_stops_the_grid_in_one_line_and_the_rerun_resumes(tmp_path):
    """A storage error (here ENOSPC, planted in one run) fails every later write too: the
    grid stops its workers at the first and says so in one line, exit 2; the cells that
    finished stay, and the rerun (disk freed) runs only the rest."""
    grid = write_grid(tmp_path / "g.toml", name="full", steps=5, seeds=12, plugins=["ablations_fixture_plugin"],
                      policies=[{"name": "explode", "fail_seed": 3, "fail_step": 1}])
    out = tmp_path / "out"
    proc = hb("grid", "run", grid, "--out", out, "--jobs", "2", env={"EXPLODE_ERRNO": "28"})
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if not ln.startswith("[")]     # the progress bar aside
    assert len(lines) == 1 and lines[0].startswith("error: the disk is full writing ")
    assert "/out/cells/" in lines[0] and "(No space left on device)" in lines[0] and "Traceback" not in proc.stderr
    stopped = len(done_ids(out))
    assert stopped < 11                   # the workers were stopped: not every other cell ran
    assert not [p for p in (out / "cells").iterdir() if p.name.startswith(".")]
    again = hb("grid", "run", grid, "--out", out, "--jobs", "2")
    assert again.returncode == 1, again.stderr          # seed 3 still fails, now with its RuntimeError
    assert f"12 cells, {stopped} already done, {12 - stopped} run, 1 failed" in again.stdout
    assert len(done_ids(out)) == 11


def test_changed_file_adds_only_new_cells_and_names_are_guarded(tmp_path, capsys):
    out = tmp_path / "out"
    grid = write_grid(tmp_path / "g.toml", name="grow", steps=4, seeds=1, policies=[{"name": "uniform"}])
    hb_in(capsys, "grid", "run", grid, "--out", out, "--jobs", 1)
    first = done_ids(out)
    mtimes = {i: (out / "cells" / i / "train.parquet").stat().st_mtime_ns for i in first}
    write_grid(grid, name="grow", steps=4, seeds=2, policies=[{"name": "uniform"}, {"name": "round_robin"}])
    stdout, _ = hb_in(capsys, "grid", "run", grid, "--out", out, "--jobs", 2)
    assert "4 cells, 1 already done, 3 run" in stdout
    assert first < done_ids(out)
    assert mtimes == {i: (out / "cells" / i / "train.parquet").stat().st_mtime_ns for i in first}
    # the same label with another config (steps changed) is never silently mixed at collect
    write_grid(grid, name="grow", steps=5, seeds=1, policies=[{"name": "uniform"}])
    hb_in(capsys, "grid", "run", grid, "--out", out, "--jobs", 1)
    _, err = hb_in(capsys, "grid", "collect", out, check=2)
    assert "both hold policy='uniform' seed=0 with different configs" in err and err.count("\n") == 1
    hb_in(capsys, "grid", "collect", out, "--current")
    assert set(pd.read_parquet(out / "train.parquet")["step"]) == set(range(1, 6))
    # a different grid name is refused unless --force-mixed
    other = write_grid(tmp_path / "other.toml", name="other", steps=4, seeds=1, policies=[{"name": "uniform"}])
    before = sorted(p.name for p in (out / "cells").iterdir())
    _, err = hb_in(capsys, "grid", "run", other, "--out", out, check=2)
    assert "holds cells of grid 'grow', not 'other'" in err and "--force" in err
    assert sorted(p.name for p in (out / "cells").iterdir()) == before
    hb_in(capsys, "grid", "run", other, "--out", out, "--force-mixed", "--jobs", 1)
    assert json.loads((out / "grid.json").read_text())["names"] == ["grow", "other"]


def test_a_grid_runs_seed_major_so_a_stopped_grid_holds_whole_seeds(tmp_path):
    """`hb grid run` runs every design of a seed before the next seed (plan.seed_major), while
    `hb grid plan` and grid.json keep the file's order."""
    from ablations import run_grid
    from ablations.plan import seed_major
    from hbsim.contract.records import read_grid_record
    grid = write_grid(tmp_path / "g.toml", name="order", steps=3, seeds=3, eval_every=3,
                      policies=[{"name": "uniform"}, {"name": "round_robin"}])
    spec = load_spec(grid)
    cells = spec.cells()
    assert [(c.label, c.seed) for c in cells][:3] == [("uniform", 0), ("uniform", 1), ("uniform", 2)]
    assert [(c.label, c.seed) for c in seed_major(cells)] == [
        ("uniform", 0), ("round_robin", 0), ("uniform", 1), ("round_robin", 1), ("uniform", 2), ("round_robin", 2)]
    seen = []
    run_grid(spec, tmp_path / "out", jobs=1, on_done=lambda answer: seen.append(answer["id"]))
    by_id = {c.id: (c.label, c.seed) for c in cells}
    assert [by_id[i] for i in seen] == [(c.label, c.seed) for c in seed_major(cells)]
    assert [tuple(p) for p in read_grid_record(tmp_path / "out")["planned"]] == [(c.id, c.label, c.seed) for c in cells]
    # seeds in their order of first appearance, not sorted
    shuffled = [c for c in cells if c.seed == 2] + [c for c in cells if c.seed != 2]
    assert [c.seed for c in seed_major(shuffled)] == [2, 2, 0, 0, 1, 1]


@pytest.mark.torch
def test_a_real_cells_process_keeps_freed_memory_as_hb_real_does(monkeypatch):
    """A grid's real cell runs where `hb real` would (`threads.keep_freed_memory`); a
    synthetic cell's process is left as it is."""
    pytest.importorskip("torch")
    from ablations import worker
    from hbsim.contract import threads
    calls = []
    monkeypatch.setattr(threads, "keep_freed_memory", lambda: calls.append(1) or True)
    assert worker.adapter_factory({"env": {"kind": "bernoulli"}}) is None and calls == []
    assert worker.adapter_factory({"env": {"kind": "real"}}) is not None and calls == [1]
