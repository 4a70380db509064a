"""A run that never leaves a policy's round-robin warm-up says so in one line before it starts
(`Policy.warmup_steps`, `hbsim.experiment.warmup_line`; `hb sim`, `hb grid run`, `hb stress`)."""
from __future__ import annotations

import pytest

import hbsim.cli
from ablations.spec import parse_spec
from ablations.stress import chosen_policies, chosen_scenarios, grid_raw
from ablations.tune import planned_configs
from hbsim.experiment import resolve_config, warmup_line
from policies import make


def _cfg(name, steps, n=6, **knobs):
    return resolve_config({"env": {"kind": "bernoulli", "n_harnesses": n}, "policy": {"name": name, **knobs},
                           "seed": 0, "steps": steps})


def test_the_warmup_is_warmup_rounds_times_harnesses_and_is_round_robin():
    assert make("harnessbandit", n_arms=6).warmup_steps() == 30          # 5 rounds (the default) x 6
    assert make("ucb1", n_arms=4, warmup_rounds=2).warmup_steps() == 8
    assert make("harnessbandit", n_arms=6, warmup_rounds=0).warmup_steps() == 0
    assert make("uniform", n_arms=6).warmup_steps() == 0 and make("round_robin", n_arms=6).warmup_steps() == 0
    pol = make("harnessbandit", n_arms=3, seed=4, warmup_rounds=2)
    from policies import Feedback
    arms = []
    for _ in range(pol.warmup_steps()):                  # exactly those steps are round robin
        arms.append(pol.select(8).arm)
        pol.update(Feedback(arm=arms[-1], learnability=0.5))
    assert arms == [0, 1, 2, 0, 1, 2] and not pol.in_warmup()


def test_the_line_names_exactly_the_policies_whose_warmup_covers_the_run():
    configs = [_cfg("harnessbandit", 30), _cfg("ucb1", 30), _cfg("uniform", 30), _cfg("mixed", 30),
               _cfg("harnessbandit", 30, warmup_rounds=1)]
    configs[4]["policy"]["label"] = "hb-short"
    assert warmup_line(configs) == (
        "2 policies are round robin for the whole run (warm-up 30 steps (warmup_rounds 5 x 6 harnesses) >= 30 "
        "steps: harnessbandit, ucb1); run more steps or lower policy.warmup_rounds")
    assert warmup_line([_cfg("harnessbandit", 31), _cfg("uniform", 5)]) is None     # 31 steps: one scored step
    assert warmup_line([_cfg("harnessbandit", 8, n=2, warmup_rounds=4)]) == (
        "1 policy is round robin for the whole run (warm-up 8 steps (warmup_rounds 4 x 2 harnesses) >= 8 steps: "
        "harnessbandit); run more steps or lower policy.warmup_rounds")


@pytest.mark.cli
def test_hb_sim_warns_in_one_line_as_the_runs_start(tmp_path, capsys):
    code = hbsim.cli.main(["sim", "--env", "bernoulli", "--policy", "harnessbandit", "--policy", "uniform",
                           "--seeds", "1", "--steps", "20", "--jobs", "1"])
    err = capsys.readouterr().err.splitlines()
    assert code == 0 and err[0].startswith("hb sim: 2 runs") and err[1] == (
        "warning: 1 policy is round robin for the whole run (warm-up 30 steps (warmup_rounds 5 x 6 harnesses) >= "
        "20 steps: harnessbandit); run more steps or lower policy.warmup_rounds")
    assert sum("round robin" in line for line in err) == 1
    hbsim.cli.main(["sim", "--env", "bernoulli", "--policy", "harnessbandit", "--seeds", "1", "--steps", "31",
                    "--jobs", "1"])
    assert "round robin" not in capsys.readouterr().err
    (tmp_path / "file").write_text("mine")              # a refused command stays one line: no warning first
    assert hbsim.cli.main(["sim", "--env", "bernoulli", "--policy", "harnessbandit", "--seeds", "1", "--steps", "5",
                           "--out", str(tmp_path / "file")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and (tmp_path / "file").read_text() == "mine"


def test_grids_and_stress_read_every_planned_run():
    raw = {"name": "short", "steps": 12, "seeds": 2, "env": {"kind": "bernoulli"},
           "policies": [{"name": "harnessbandit"}, {"name": "uniform"}, {"name": "exp3s", "warmup_rounds": 1}]}
    assert warmup_line(planned_configs(parse_spec(raw, "short.toml"))) == (
        "1 policy is round robin for the whole run (warm-up 30 steps (warmup_rounds 5 x 6 harnesses) >= 12 steps: "
        "harnessbandit); run more steps or lower policy.warmup_rounds")
    stress = parse_spec(grid_raw(chosen_scenarios("trap"), chosen_policies(None, True), 2, True), "hb stress")
    labels = {c["policy"]["label"] for c in planned_configs(stress)}
    assert {"harnessbandit[part=trap]", "harnessbandit[part=trap@3x]", "fixed[arm=0][part=trap+fixed]"} <= labels
    assert warmup_line(planned_configs(stress)) is None          # trap's 100 steps leave every warm-up


@pytest.mark.cli
def test_hb_grid_run_warns_once_as_its_cells_start(tmp_path, capsys):
    grid = tmp_path / "g.toml"
    grid.write_text('name = "short"\nsteps = 6\nseeds = 1\n[env]\nkind = "bernoulli"\n'
                    '[[policies]]\nname = "harnessbandit"\n[[policies]]\nname = "uniform"\n')
    assert hbsim.cli.main(["grid", "run", str(grid), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [line for line in err if line.startswith("warning:")] == [
        "warning: 1 policy is round robin for the whole run (warm-up 30 steps (warmup_rounds 5 x 6 harnesses) >= 6 "
        "steps: harnessbandit); run more steps or lower policy.warmup_rounds"] and err[0].startswith("warning:")
