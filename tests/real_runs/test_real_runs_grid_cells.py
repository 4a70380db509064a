"""scripts/real_grid_cells.py: a real grid's cells as resumable `hb real` runs, and with
--grid each complete run also a cell of a grid directory that `hb grid collect` reads."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from ablations.spec import load_spec
from ablations_testkit import hb, write_grid, without_wall_clock

ROOT = Path(__file__).resolve().parents[2]
TINY = {"kind": "real", "preset": "tiny", "warm_steps": 2, "n_train_tasks": 30, "n_heldout_tasks": 5,
        "eval_tasks": 1, "eval_attempts": 1, "max_new_tokens": 8}


def script(grid, out, *extra, env):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "real_grid_cells.py"), str(grid), "--out", str(out),
                           "--jobs", "2", *map(str, extra)], env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_runs_become_the_cells_of_a_grid_that_collects(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HB_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    spec_file = write_grid(tmp_path / "real.toml", steps=2, seeds=1, env=TINY,
                           policies=[{"name": "uniform"}, {"name": "round_robin"}], top_extra={"batch_groups": 2})
    cells = load_spec(spec_file).cells()
    done = script(spec_file, tmp_path / "runs", "--grid", tmp_path / "grid", env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 of 2 cells complete; running 2" in done.stderr and done.stderr.count("finished") == 2
    for cell in cells:
        run = tmp_path / "runs" / f"{cell.label}-s{cell.seed}"
        got = tmp_path / "grid" / "cells" / cell.id
        meta = json.loads((got / "run.json").read_text())
        assert meta["grid"] == {"name": load_spec(spec_file).name, "cell_id": cell.id, "sweep": cell.sweep,
                                "label": cell.label, "seed": cell.seed}
        assert not (run / "checkpoints").exists()                       # removed once the run is complete
        for table in ("train.parquet", "eval.parquet", "groups.parquet"):
            pd.testing.assert_frame_equal(pd.read_parquet(got / table), pd.read_parquet(run / table))
    hb("grid", "collect", tmp_path / "grid", check=0)
    train = pd.read_parquet(tmp_path / "grid" / "train.parquet")
    assert sorted(train["policy"].unique()) == sorted(c.label for c in cells) and len(train) == 2 * 2
    again = script(spec_file, tmp_path / "runs", "--grid", tmp_path / "grid", env=env)   # nothing left to run
    assert again.returncode == 0 and "2 of 2 cells complete; running 0" in again.stderr
    assert without_wall_clock(pd.read_parquet(tmp_path / "grid" / "cells" / cells[0].id / "train.parquet")).equals(
        without_wall_clock(pd.read_parquet(tmp_path / "runs" / f"{cells[0].label}-s0" / "train.parquet")))
