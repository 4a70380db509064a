"""kill -9 of the runner and all its workers, twice, at different moments; the re-run
completes the grid without recomputing or duplicating a cell, and the collected tables
equal an uninterrupted run's."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from ablations_testkit import REPO, env_with_plugin_path, hb, without_wall_clock, write_grid
from pandas.testing import assert_frame_equal

import ablations
from ablations.spec import load_spec
from hbsim.contract.records import done_ids, load_cells

pytestmark = pytest.mark.slow  # every test here spawns processes (make test-fast skips them)

RUN_FILES = ["eval.parquet", "groups.parquet", "log.txt", "run.json", "train.parquet"]


def _kill_when(grid, out, min_done: int) -> int:
    """Start `hb grid run` in its own process group, SIGKILL the whole group as soon as
    `min_done` cells are complete; returns how many were complete at the kill."""
    proc = subprocess.Popen([sys.executable, "-m", "hbsim.cli", "grid", "run", str(grid), "--out", str(out),
                             "--jobs", "2"], cwd=REPO, env=env_with_plugin_path(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(done_ids(out)) < min_done and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    return len(done_ids(out))


def _assert_cells_complete(out) -> None:
    for cell_id in done_ids(out):
        assert sorted(p.name for p in (out / "cells" / cell_id).iterdir()) == RUN_FILES


def test_sigkill_mid_grid_then_resume_equals_uninterrupted(tmp_path):
    grid = write_grid(tmp_path / "g.toml", name="kill", steps=40, seeds=4, eval_every=20,
                      policies=[{"name": "uniform"}, {"name": "harnessbandit", "warmup_rounds": 1},
                                {"name": "mixed", "label": "mixed-2", "arms": [0, 1]}])
    total = len(load_spec(grid).cells())
    out = tmp_path / "killed"

    first = _kill_when(grid, out, min_done=1)
    assert 1 <= first < total, f"kill came too late: {first}/{total} cells were done"
    _assert_cells_complete(out)
    kept = {i: (out / "cells" / i / "train.parquet").stat().st_mtime_ns for i in done_ids(out)}

    second = _kill_when(grid, out, min_done=first + 3)
    assert first < second < total, (first, second, total)
    _assert_cells_complete(out)

    proc = hb("grid", "run", grid, "--out", out, "--jobs", "2", check=0)
    assert f"{total} cells, {second} already done, {total - second} run, 0 failed" in proc.stdout
    assert len(done_ids(out)) == total
    _assert_cells_complete(out)
    assert not [p for p in (out / "cells").iterdir() if p.name.startswith(".")]
    # no finished cell was recomputed
    assert kept == {i: (out / "cells" / i / "train.parquet").stat().st_mtime_ns for i in kept}

    ref = tmp_path / "uninterrupted"
    report = ablations.run_grid(load_spec(grid), ref, jobs=2)
    assert report.ran == total and not report.failed
    hb("grid", "collect", out, check=0)
    clean = load_cells(ref)
    for name, killed in zip(("train", "eval"), load_cells(out)):
        assert_frame_equal(pd.read_parquet(out / f"{name}.parquet"), killed, check_exact=True)
    for killed, clean_df in zip(load_cells(out), clean):
        # seconds_* are measured wall-clock times: the only columns allowed to differ
        assert_frame_equal(without_wall_clock(killed), without_wall_clock(clean_df), check_exact=True)
    train = clean[0]
    assert len(train) == total * 40 and not train.duplicated(["run_id", "step"]).any()
