"""Grid files: cells, labels, stable ids, and every bad-input case (one line, exit 2,
nothing in DIR modified)."""
from __future__ import annotations

import json

import pytest
from ablations_testkit import TINY_ENV, grid_text, snapshot, write_grid

import ablations
from ablations.spec import load_spec
from hbsim.contract.records import config_hash
from hbsim.cli import main as hb_main


def test_cells_are_policies_x_sweep_points_x_seeds(tmp_path):
    path = write_grid(tmp_path / "g.toml", seeds=[3, 5], policies=[
        {"name": "uniform"},
        {"name": "harnessbandit", "label": "hb-tau0.1", "tau": 0.1},
        {"name": "mixed", "arms": [0, 1]}],
        sweep={"policy.window": [8, 16], "env.drift": [0.0, 0.02]})
    spec = load_spec(path)
    cells = spec.cells()
    # window applies to harnessbandit only: uniform and mixed get 2 env points, hb gets 2 x 2
    assert len(cells) == (2 + 4 + 2) * 2
    labels = sorted({c.label for c in cells})
    assert labels == sorted(["hb-tau0.1[drift=0.0,window=16]", "hb-tau0.1[drift=0.0,window=8]",
                      "hb-tau0.1[drift=0.02,window=16]", "hb-tau0.1[drift=0.02,window=8]",
                      "mixed[arms=[0,1]][drift=0.0]", "mixed[arms=[0,1]][drift=0.02]",
                      "uniform[drift=0.0]", "uniform[drift=0.02]"])
    hb = [c for c in cells if c.label == "hb-tau0.1[drift=0.02,window=8]"]
    assert [c.seed for c in hb] == [3, 5]
    cfg = hb[0].config
    assert cfg["policy"]["window"] == 8 and cfg["policy"]["tau"] == 0.1
    assert cfg["env"]["drift"] == 0.02 and cfg["env"]["kind"] == "bernoulli"
    assert cfg["policy"]["alpha"] == 0.5          # defaults filled by hbsim.resolve_config
    assert hb[0].sweep == {"env.drift": 0.02, "policy.window": 8}
    assert [c for c in cells if c.label.startswith("uniform")][0].sweep == {"env.drift": 0.0}
    assert all(c.id == config_hash(c.config) and len(c.id) == 16 for c in cells)
    assert len({c.id for c in cells}) == len(cells)


def test_default_label_names_the_knobs_and_the_sweep(tmp_path):
    path = write_grid(tmp_path / "g.toml", seeds=1, policies=[{"name": "harnessbandit", "tau": 0.1}],
                      sweep={"policy.window": [16]})
    assert [c.label for c in load_spec(path).cells()] == ["harnessbandit[tau=0.1][window=16]"]


def test_ids_do_not_depend_on_file_order(tmp_path):
    pols = [{"name": "uniform"}, {"name": "harnessbandit", "tau": 0.2, "window": 8}, {"name": "round_robin"}]
    a = write_grid(tmp_path / "a.toml", policies=pols, sweep={"policy.alpha": [0.3, 0.7], "env.drift": [0.0, 0.02]})
    shuffled = [pols[2], {"window": 8, "tau": 0.2, "name": "harnessbandit"}, pols[0]]
    text = grid_text(policies=shuffled, sweep={"env.drift": [0.02, 0.0], "policy.alpha": [0.7, 0.3]},
                     env=dict(reversed(list(TINY_ENV.items()))))
    b = tmp_path / "b.toml"
    b.write_text(text)
    ids_a = {c.id: c.label for c in load_spec(a).cells()}
    ids_b = {c.id: c.label for c in load_spec(b).cells()}
    assert ids_a == ids_b and len(ids_a) == 16


def test_resolved_config_hash_is_the_documented_one(tmp_path):
    import hashlib
    cell = load_spec(write_grid(tmp_path / "g.toml", seeds=1, policies=[{"name": "uniform"}])).cells()[0]
    canonical = json.dumps(cell.config, sort_keys=True, separators=(",", ":"))
    assert cell.id == hashlib.sha256(canonical.encode()).hexdigest()[:16]


# -- bad input: one line, exit 2, naming file + key; nothing in DIR modified ---------
BAD_CASES = {
    "malformed": ('name = "g"\nsteps = 5\nseeds = [0,\n[env]\n', "line 4"),
    "unknown_top_key": (grid_text(top_extra={"stepz": 3}), "'stepz': unknown key"),
    "unknown_policy": (grid_text(policies=[{"name": "fused"}]), "unknown policy 'fused'; valid names: uniform"),
    "unknown_env": (grid_text(env={"kind": "bernouli"}), "'env.kind': unknown env kind 'bernouli'; valid kinds: bernoulli,"),
    "unknown_env_knob": (grid_text(env={**TINY_ENV, "n_harnesess": 3}), "'env.n_harnesess': env kind 'bernoulli' has no knob 'n_harnesess'; valid knobs: n_harnesses,"),
    "knob_policy_lacks": (grid_text(policies=[{"name": "uniform", "tau": 0.1}]),
                          "'policies[0].tau': policy 'uniform' has no knob 'tau'"),
    "bad_value_range": (grid_text(policies=[{"name": "harnessbandit", "epsilon": 1.5}]),
                        "'policies[0].epsilon': policy.epsilon=1.5 is out of range: expected a finite number in [0.0, 1.0]"),
    "bad_value_type": (grid_text(policies=[{"name": "harnessbandit", "tau": "hot"}]), "'policies[0].tau'"),
    "bad_env_value": (grid_text(env={**TINY_ENV, "group_size": 1}), "'env.group_size': env.group_size=1 is not allowed: expected an integer in [2, 1024]"),
    "bad_steps": (grid_text(steps=0), "'steps': steps=0 is not allowed: expected an integer in [1, 1000000]"),
    "bad_seeds": (grid_text(seeds=[1, 1]), "'seeds'"),
    "empty_grid": ('name = "g"\nsteps = 5\nseeds = 2\n[env]\nkind = "bernoulli"\n', "the grid is empty"),
    "sweep_no_policy_has_knob": (grid_text(policies=[{"name": "uniform"}], sweep={"policy.tau": [0.1]}),
                                 "no policy of the grid (uniform) has knob 'tau'"),
    "sweep_bad_scope": (grid_text(sweep={"optim.lr": [0.1]}), "unknown sweep key"),
    "sweep_empty": (grid_text(sweep={"policy.tau": []}), "non-empty list"),
    "sweep_bad_value": (grid_text(sweep={"policy.tau": [0.1, -1.0]}), "'sweep.policy.tau': policies[1] at sweep point tau=-1.0"),
    "duplicate_label": (grid_text(policies=[{"name": "uniform"}, {"name": "uniform"}]), "used twice"),
    "bad_plugin": (grid_text(plugins=["no_such_module_xyz"]), "'plugins[0]'"),
}


@pytest.mark.cli
@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_grid_file_is_one_line_exit_2_and_touches_nothing(case, tmp_path, capsys):
    text, expected = BAD_CASES[case]
    grid = tmp_path / "bad.toml"
    grid.write_text(text)
    out = tmp_path / "out"
    good = write_grid(tmp_path / "good.toml", name="bad" if case != "malformed" else "g",
                      seeds=1, steps=3, policies=[{"name": "uniform"}])
    assert hb_main(["grid", "run", str(good), "--out", str(out), "--jobs", "1"]) == 0
    capsys.readouterr()
    before = snapshot(out)
    for argv in (["grid", "run", str(grid), "--out", str(out), "--jobs", "1"], ["grid", "plan", str(grid)]):
        assert hb_main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert err.startswith(f"error: {grid}: key ") or case == "malformed", err
        assert expected in err, err
    assert snapshot(out) == before


@pytest.mark.cli
def test_unwritable_output_dir(tmp_path, capsys):
    grid = write_grid(tmp_path / "g.toml", seeds=1, policies=[{"name": "uniform"}])
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert hb_main(["grid", "run", str(grid), "--out", str(blocker / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file" in err and "--out" in err
    assert blocker.read_text() == "x"
    assert hb_main(["grid", "run", str(grid), "--out", "/proc/hb-grid-out"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not writable" in err


@pytest.mark.cli
def test_bad_cli_arguments(tmp_path, capsys):
    grid = write_grid(tmp_path / "g.toml", seeds=1, policies=[{"name": "uniform"}])
    out = tmp_path / "out"
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--backend", "slurm"]) == 2
    assert "valid backends: local, ray" in capsys.readouterr().err
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "0"]) == 2
    assert "--jobs=0" in capsys.readouterr().err
    assert hb_main(["grid", "run", str(tmp_path / "missing.toml"), "--out", str(out)]) == 2
    assert "grid file not found" in capsys.readouterr().err
    assert hb_main(["grid", "status", str(tmp_path)]) == 2
    assert "not a grid directory" in capsys.readouterr().err
    assert not out.exists()


def test_parse_spec_api_rejects_non_table_policies():
    with pytest.raises(ablations.SpecError, match=r"<grid>: key 'policies\[0\]': is not a table"):
        ablations.parse_spec({"name": "g", "steps": 2, "seeds": 1, "env": {"kind": "bernoulli"},
                              "policies": ["uniform"]})


@pytest.mark.cli
def test_real_env_grids_plan_without_building_a_model(tmp_path, capsys):
    grid = write_grid(tmp_path / "real.toml", seeds=1, env={"kind": "real", "preset": "tiny"},
                      policies=[{"name": "uniform"}], sweep={"env.lr": [0.001, 0.003]})
    cells = load_spec(grid).cells()
    assert [c.label for c in cells] == ["uniform[lr=0.001]", "uniform[lr=0.003]"]
    assert cells[0].config["env"]["kind"] == "real" and cells[0].config["env"]["n_harnesses"] == 6
    bad = write_grid(tmp_path / "bad.toml", seeds=1, env={"kind": "real", "preset": "huge"},
                     policies=[{"name": "uniform"}])
    assert hb_main(["grid", "plan", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "preset" in err and str(bad) in err


def test_planning_builds_each_policy_variant_once_and_each_env_once(tmp_path, monkeypatch):
    """2 variants x 2 sweep points x 3 seeds = 12 cells: 4 policy builds (one per variant and
    point, whatever the seeds) and 2 env builds (one per distinct env)."""
    import hbsim.envs.base
    import policies.base
    built = {"policy": 0, "env": 0}
    for key, cls in (("policy", policies.base.Policy), ("env", hbsim.envs.base.SyntheticEnv)):
        original = cls.__init__

        def counting(self, *args, _original=original, _key=key, **kwargs):
            built[_key] += 1
            _original(self, *args, **kwargs)
        monkeypatch.setattr(cls, "__init__", counting)
    path = write_grid(tmp_path / "g.toml", seeds=3, policies=[{"name": "uniform"}, {"name": "harnessbandit"}],
                      sweep={"env.drift": [0.0, 0.02]})
    assert len(load_spec(path).cells()) == 12
    assert built == {"policy": 4, "env": 2}
