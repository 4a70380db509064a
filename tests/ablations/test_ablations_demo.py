"""`hb demo` end to end on a tiny stand-in grid (the real one is ablations/examples/demo_grid.toml,
checked here for its design: the paper's on the table1 scenario, with the oracle), through the
real reports package."""
from __future__ import annotations

from ablations_testkit import TINY_ENV, write_grid

from ablations.demo import BASELINE, DEFAULT_GRID
from ablations.spec import load_spec
from hbsim.envs import make_env
from hbsim.scenarios import SCENARIOS
from hbsim.cli import main as hb_main

PAPER_DESIGNS = {"mixed-2", "mixed-all", "uniform", "round_robin", "learnability", "transfer",
                 "harnessbandit", "product"}


def test_demo_grid_is_the_paper_design():
    for path, min_seeds in ((DEFAULT_GRID.parent / "demo_bernoulli.toml", 5),
                            (DEFAULT_GRID.parent / "paper_grid.toml", 10)):
        spec = load_spec(path)
        cells = spec.cells()
        assert {c.label for c in cells} == PAPER_DESIGNS and len(spec.seeds) >= min_seeds
        assert spec.env["kind"] == "bernoulli"
        mixed2 = [c for c in cells if c.label == BASELINE][0]
        assert mixed2.config["policy"]["arms"] == [0, 1]
        assert len(cells) == 8 * len(spec.seeds)


def test_the_demo_runs_the_paper_design_on_table1_with_the_oracle():
    """The main job runs where the schedule matters: the table1 scenario at its shipped seeds
    and steps, mixed-2 over its two primaries, and the oracle aimed at the training objective
    (the denominator of the share of the achievable gain that `hb demo` prints). At least 10
    seeds: fewer cannot pass Holm over the demo's 16 candidate x suite comparisons."""
    spec = load_spec(DEFAULT_GRID)
    cells = spec.cells()
    assert {c.label for c in cells} == PAPER_DESIGNS | {"oracle[target=train]"}
    assert spec.scenario["name"] == "table1" and spec.env == SCENARIOS["table1"].env
    assert len(spec.seeds) == SCENARIOS["table1"].seeds >= 10 and spec.steps == SCENARIOS["table1"].steps
    mixed2 = [c for c in cells if c.label == BASELINE][0]
    harnesses = make_env("scenario", **{k: v for k, v in spec.env.items() if k != "kind"}).harnesses
    assert [harnesses[a] for a in mixed2.config["policy"]["arms"]] == ["primary1", "primary2"]
    assert len(cells) == 9 * len(spec.seeds)


def test_demo_runs_collects_and_reports(tmp_path, capsys):
    grid = write_grid(tmp_path / "demo.toml", name="demo-tiny", steps=6, seeds=3,
                      env={**TINY_ENV, "k_attempts": 3}, policies=[
        {"name": "mixed", "label": "mixed-2", "arms": [0, 1]}, {"name": "harnessbandit", "warmup_rounds": 1},
        {"name": "uniform"}, {"name": "oracle", "target": "train"}])
    out = tmp_path / "demo"
    argv = ["demo", "--grid", str(grid), "--out", str(out), "--resamples", "200", "--jobs", "1"]
    assert hb_main(argv) == 0
    stdout, stderr = capsys.readouterr()
    index = out / "report" / "index.html"
    assert index.is_file() and index.stat().st_size > 1000
    assert stdout.strip().splitlines()[-1] == f"report: {index.resolve()}"
    assert "baseline mixed-2" in stdout and "harnessbandit[warmup_rounds=1]" in stdout
    # with uniform and the oracle in the grid, the share of the achievable gain (reports.readings.references)
    shares = stdout[stdout.index("share of the achievable gain"):]
    assert "train: reference = 'oracle[target=train]'" in shares
    block = shares[: shares.index("suite ")].splitlines()         # up to the headline table
    assert {"mixed-2", "harnessbandit[warmup_rounds=1]"} <= {ln.split()[0] for ln in block if ln.strip()}
    assert (out / "train.parquet").is_file() and (out / "eval.parquet").is_file()
    assert "12/12 cells" in stderr
    # resumable: the demo's directory is an ordinary grid directory, so a rerun reuses every cell
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert "12 cells, 12 already done, 0 run, 0 failed" in capsys.readouterr().out
