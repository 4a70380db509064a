"""The published schedulers and the group filter plug into grids: a grid whose cells run
`sec`, `variance` and `tac` (one with a swept knob) on an env with a keep band runs, and
its cells record the knobs."""
from __future__ import annotations

from ablations_testkit import write_grid

from ablations.spec import load_spec
from hbsim.cli import main as hb_main
from hbsim.contract.records import load_cells


def test_grid_cells_with_published_policies_and_a_keep_band_run(tmp_path, capsys):
    policies = [{"name": "sec", "update": "all"}, {"name": "variance", "rule": "topk", "top_k": 2},
                {"name": "tac"}]
    grid = write_grid(tmp_path / "g.toml", name="pub", steps=5, seeds=1, policies=policies,
                      env={"kind": "bernoulli", "n_tasks": 20, "keep_band": [0.25, 0.75]},
                      sweep={"policy.tau": [1.0, 0.2]})
    cells = load_spec(grid).cells()
    # the tau sweep applies to the policies that have the knob: sec and tac twice, variance once
    assert sorted(c.label for c in cells) == ["sec[update=all][tau=0.2]", "sec[update=all][tau=1.0]",
                                              "tac[tau=0.2]", "tac[tau=1.0]", "variance[rule=topk,top_k=2]"]
    assert hb_main(["grid", "run", str(grid), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    capsys.readouterr()
    train = load_cells(tmp_path / "out")[0]
    assert sorted(train["policy"].unique()) == sorted(c.label for c in cells)
    assert (train.groupby("run_id").size() == 5).all()
    assert all(c.config["env"]["keep_band"] == "0.25,0.75" for c in cells)
