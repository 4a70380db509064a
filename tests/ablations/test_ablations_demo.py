"""`hb demo` end to end on a tiny stand-in grid (the real one is ablations/examples/demo_grid.toml,
checked here for its design), through the real reports package."""
from __future__ import annotations

from ablations_testkit import TINY_ENV, write_grid

from ablations.demo import BASELINE, DEFAULT_GRID
from ablations.spec import load_spec
from hbsim.cli import main as hb_main

PAPER_DESIGNS = {"mixed-2", "mixed-all", "uniform", "round_robin", "learnability", "transfer",
                 "harnessbandit", "product"}


def test_demo_grid_is_the_paper_design():
    for path, min_seeds in ((DEFAULT_GRID, 5), (DEFAULT_GRID.parent / "paper_grid.toml", 10)):
        spec = load_spec(path)
        cells = spec.cells()
        assert {c.label for c in cells} == PAPER_DESIGNS and len(spec.seeds) >= min_seeds
        assert spec.env["kind"] == "bernoulli"
        mixed2 = [c for c in cells if c.label == BASELINE][0]
        assert mixed2.config["policy"]["arms"] == [0, 1]
        assert len(cells) == 8 * len(spec.seeds)


def test_demo_runs_collects_and_reports(tmp_path, capsys):
    grid = write_grid(tmp_path / "demo.toml", name="demo-tiny", steps=6, seeds=3,
                      env={**TINY_ENV, "k_attempts": 3}, policies=[
        {"name": "mixed", "label": "mixed-2", "arms": [0, 1]}, {"name": "harnessbandit", "warmup_rounds": 1}])
    out = tmp_path / "demo"
    argv = ["demo", "--grid", str(grid), "--out", str(out), "--resamples", "200", "--jobs", "1"]
    assert hb_main(argv) == 0
    stdout, stderr = capsys.readouterr()
    index = out / "report" / "index.html"
    assert index.is_file() and index.stat().st_size > 1000
    assert stdout.strip().splitlines()[-1] == f"report: {index.resolve()}"
    assert "baseline mixed-2" in stdout and "harnessbandit[warmup_rounds=1]" in stdout
    assert (out / "train.parquet").is_file() and (out / "eval.parquet").is_file()
    assert "6/6 cells" in stderr
    # resumable: the demo's directory is an ordinary grid directory, so a rerun reuses every cell
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert "6 cells, 6 already done, 0 run, 0 failed" in capsys.readouterr().out
