"""The Ray backend on a local Ray instance (2 CPUs): same cells, same tables as local (hb grid, hb sim)."""
from __future__ import annotations

import pytest
from ablations_testkit import hb, without_wall_clock, write_grid
from pandas.testing import assert_frame_equal

import ablations
from ablations.spec import load_spec
from hbsim.contract.records import done_ids, load_cells

pytestmark = pytest.mark.slow  # every test here spawns processes (make test-fast skips them)

try:
    import ray  # noqa: F401
    RAY_ERROR = None
except ImportError as exc:  # pragma: no cover - ray is in the [ray] extra
    RAY_ERROR = f"ray cannot be imported ({exc}); the local backend is the tested one"


@pytest.mark.cli
@pytest.mark.skipif(RAY_ERROR is not None, reason=str(RAY_ERROR))
def test_ray_backend_matches_local(tmp_path):
    grid = write_grid(tmp_path / "g.toml", name="ray", steps=6, seeds=2,
                      policies=[{"name": "uniform"}, {"name": "harnessbandit", "warmup_rounds": 1}])
    spec = load_spec(grid)
    local = tmp_path / "local"
    ablations.run_grid(spec, local, jobs=1)
    out = tmp_path / "ray"
    proc = hb("grid", "run", grid, "--out", out, "--backend", "ray", "--jobs", 2, check=0)
    assert "4 cells, 0 already done, 4 run, 0 failed" in proc.stdout
    assert done_ids(out) == {c.id for c in spec.cells()}
    for ray_df, local_df in zip(load_cells(out), load_cells(local)):
        assert_frame_equal(without_wall_clock(ray_df), without_wall_clock(local_df), check_exact=True)


@pytest.mark.skipif(RAY_ERROR is not None, reason=str(RAY_ERROR))
def test_ray_backend_runs_hb_sim_like_local(tmp_path):
    sim = ["sim", "--policy", "uniform", "--policy", "harnessbandit", "--seeds", "2", "--steps", "6",
           "--set", "env.n_tasks=12", "--set", "env.n_heldout_tasks=4"]
    local = hb(*sim, "--jobs", 1, check=0)
    ray_run = hb(*sim, "--backend", "ray", "--jobs", 2, "--out", tmp_path / "ray", check=0)
    assert ray_run.stdout == local.stdout and "4/4 runs" in ray_run.stderr
    assert sorted(p.name for p in (tmp_path / "ray" / "uniform").iterdir()) == ["seed0", "seed1"]


@pytest.mark.cli
def test_ray_backend_without_its_extra_is_one_line_before_any_write(tmp_path, monkeypatch, capsys):
    """A base install: `--backend ray` names the extra before the grid folder is written (it
    used to fail after grid.json and cells/ were made, with another wording than every extra's)."""
    import importlib.util

    from hbsim.cli import main
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real_find_spec(name, *a))
    grid = write_grid(tmp_path / "g.toml", name="noray", steps=3, seeds=1, policies=[{"name": "uniform"}])
    for args in (["grid", "run", str(grid), "--out", str(tmp_path / "out")], ["sim", "--steps", "3", "--seeds", "1"],
                 ["stress", "--quick", "--scenarios", "trap", "--out", str(tmp_path / "out")]):
        assert main([*args, "--backend", "ray"]) == 2, args
        assert capsys.readouterr().err.strip() == "error: --backend ray needs the optional extra: pip install 'harnessbandit[ray]'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml"]


@pytest.mark.cli
def test_a_real_grid_without_torch_is_one_line_before_any_write(tmp_path, monkeypatch, capsys):
    """A base install: a grid of real cells names the torch extra before the grid folder is
    written (each cell used to fail on its own with a ModuleNotFoundError)."""
    import importlib.util

    from hbsim.cli import main
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real_find_spec(name, *a))
    grid = write_grid(tmp_path / "g.toml", name="notorch", steps=2, seeds=1, policies=[{"name": "uniform"}],
                      env={"kind": "real", "preset": "tiny"})
    assert main(["grid", "run", str(grid), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == ("error: grid 'notorch' (real cells: [env] kind = \"real\") needs the "
                                               "optional extra: pip install 'harnessbandit[torch]'")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.toml"]
