"""Grid [tune]: tuning seeds apart from test seeds, the selection by the validation split,
resume, and every bad [tune] field (one line, exit 2)."""
from __future__ import annotations

import json
import shutil

import pytest
from ablations_testkit import grid_text, snapshot

from ablations import tune
from ablations.spec import SpecError, load_spec
from hbsim.cli import main as hb_main
from hbsim.contract.records import done_ids, read_meta

ENV = {"kind": "bernoulli", "n_harnesses": 3, "n_tasks": 30, "n_heldout_tasks": 6, "k_attempts": 2,
       "n_validation_tasks": 10, "n_zero": 0, "n_saturating": 0}
#: env.lr = 0 with task_lr = 0 cannot learn at all (validation stays at its start); 3.0 learns: the planted best
TUNE = '[tune]\nseeds = [100, 101]\ntarget = "validation"\n[tune.knobs]\n"env.lr" = [0.0, 3.0]\n"policy.tau" = [0.2, 0.5]\n'


def write(tmp_path, tune_text=TUNE, seeds=(0, 1), env=None, **kw):
    path = tmp_path / "g.toml"
    text = grid_text(name="tuned", steps=15, seeds=list(seeds), env={**ENV, "task_lr": 0.0, **(env or {})},
                     policies=[{"name": "uniform"}, {"name": "harnessbandit", "warmup_rounds": 1}], **kw)
    path.write_text(text + tune_text)
    return path


def test_tuning_and_test_seeds_are_apart_and_the_planted_best_is_selected(tmp_path, capsys):
    grid, out = write(tmp_path), tmp_path / "out"
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    tuning = [read_meta(out / "tune" / "cells" / i) for i in done_ids(out / "tune")]
    test = [read_meta(out / "cells" / i) for i in done_ids(out)]
    assert len(tuning) == (2 + 4) * 2 and len(test) == 2 * 2
    assert {m["seed"] for m in tuning} == {100, 101} and {m["seed"] for m in test} == {0, 1}
    selection = json.loads((out / "tune.json").read_text())
    for label in ("uniform", "harnessbandit[warmup_rounds=1]"):
        design = selection["designs"][label]
        assert design["setting"]["env.lr"] == 3.0
        lr0 = [p["score"] for p in design["points"] if p["setting"]["env.lr"] == 0.0]
        assert max(lr0) < design["score"]
    assert "policy.tau" not in selection["designs"]["uniform"]["setting"]     # uniform has no tau
    # the test cells run the selected setting, labelled by the design alone
    hb_test = [m for m in test if m["label"].startswith("harnessbandit")]
    assert {m["label"] for m in hb_test} == {"harnessbandit[warmup_rounds=1]"}
    chosen = selection["designs"]["harnessbandit[warmup_rounds=1]"]["setting"]
    assert all(m["config"]["env"]["lr"] == 3.0 and m["config"]["policy"]["tau"] == chosen["policy.tau"]
               for m in hb_test)
    assert "selected uniform: env.lr=3.0" in capsys.readouterr().out


def test_ties_go_to_the_first_listed_point(tmp_path):
    # lr = 0 and task_lr = 0: every point of a design scores the same -> the first one is kept
    grid, out = write(tmp_path, tune_text=TUNE.replace("[0.0, 3.0]", "[0.0]")), tmp_path / "out"
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    design = json.loads((out / "tune.json").read_text())["designs"]["harnessbandit[warmup_rounds=1]"]
    assert len({p["score"] for p in design["points"]}) == 1
    assert design["setting"] == design["points"][0]["setting"] == {"env.lr": 0.0, "policy.tau": 0.2}


def test_resume_after_interruption_gives_the_same_selection(tmp_path):
    grid, out = write(tmp_path), tmp_path / "out"
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    before = (out / "tune.json").read_text()
    test_ids = done_ids(out)
    # an interruption in the tuning phase: one tuning cell, every test cell and the selection gone
    shutil.rmtree(out / "tune" / "cells" / sorted(done_ids(out / "tune"))[0])
    for cell in test_ids:
        shutil.rmtree(out / "cells" / cell)
    (out / "tune.json").unlink()
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    assert (out / "tune.json").read_text() == before
    assert done_ids(out) == test_ids
    spec = tune.recorded_test_spec(load_spec(grid), out)        # hb grid status / collect see the test phase
    assert {c.id for c in spec.cells()} == test_ids


def test_report_reads_only_test_seeds_and_lists_the_settings(tmp_path, capsys):
    grid, out = write(tmp_path), tmp_path / "out"
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 0
    from reports import load
    frames = load.read_dir(out)
    assert set(frames.eval["seed"]) == {0, 1} and "validation" not in set(frames.eval_all["suite"])
    capsys.readouterr()
    assert hb_main(["report", str(out), "--baseline", "uniform", "--resamples", "50"]) == 0
    text = capsys.readouterr().out
    assert "tuned on seeds [100, 101] by suite 'validation'" in text
    assert "  uniform: env.lr=3.0" in text


@pytest.mark.parametrize("tune_text, env, key", [
    ('[tune]\nseeds = [1, 7]\n[tune.knobs]\n"env.lr" = [1.0]\n', None, "tune.seeds"),       # overlaps test seed 1
    ('[tune]\nseeds = []\n[tune.knobs]\n"env.lr" = [1.0]\n', None, "tune.seeds"),
    ('[tune]\nseeds = [5, 5]\n[tune.knobs]\n"env.lr" = [1.0]\n', None, "tune.seeds"),
    ('[tune]\nseeds = [5]\ntarget = "heldout"\n[tune.knobs]\n"env.lr" = [1.0]\n', None, "tune.target"),
    ('[tune]\nseeds = [5]\nsplit = 3\n[tune.knobs]\n"env.lr" = [1.0]\n', None, "tune.split"),
    ('[tune]\nseeds = [5]\n', None, "tune.knobs"),
    ('[tune]\nseeds = [5]\n[tune.knobs]\n"policy.nope" = [1]\n', None, "tune.knobs.policy.nope"),
    ('[tune]\nseeds = [5]\n[tune.knobs]\n"env.lr" = [-1.0]\n', None, "tune.knobs.env.lr"),
    ('[tune]\nseeds = [5]\n[tune.knobs]\n"env.lr" = [1.0]\n', {"n_validation_tasks": 0}, "env.n_validation_tasks"),
    ("", None, "tune"),                                   # tune = 3 (not a table), see below
])
def test_bad_tune_fields_are_one_line_exit_2(tmp_path, capsys, tune_text, env, key):
    grid = write(tmp_path, tune_text=tune_text, env=env, **({} if tune_text else {"top_extra": {"tune": 3}}))
    out = tmp_path / "out"
    with pytest.raises(SpecError, match=f"key '{key}'"):
        load_spec(grid)
    before = snapshot(tmp_path)
    assert hb_main(["grid", "run", str(grid), "--out", str(out), "--jobs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"key '{key}'" in err
    assert snapshot(tmp_path) == before and not out.exists()


def test_tune_and_sweep_together_is_refused(tmp_path):
    grid = write(tmp_path, sweep={"env.drift": [0.0, 0.1]})
    with pytest.raises(SpecError, match="key 'tune': a grid with \\[tune\\] has no \\[sweep\\]"):
        load_spec(grid)


@pytest.mark.parametrize("env", ["bernoulli", "drifting", "student"])
def test_shipped_competitor_grids_tune_lr_scale_per_design(env):
    # README "Published schedulers, tuned": one file per default env; every design tunes its own
    # lr_scale (every policy has it), tau only where it has the knob, on seeds apart from the test
    name = "competitors" if env == "bernoulli" else f"competitors_{env}"
    from pathlib import Path
    spec = load_spec(Path(__file__).resolve().parents[2] / "ablations" / "examples" / f"{name}.toml")
    assert spec.env["kind"] == env and spec.eval_budget.startswith("groups:")
    assert not set(spec.tune.seeds) & set(spec.seeds) and len(spec.seeds) == 20
    assert not any(k.startswith("env.") for k in spec.tune.knobs)
    points = {label: {tuple(sorted(c.sweep)) for c in cells} for label, cells in tune.tuning_cells(spec).items()}
    with_tau = {"harnessbandit", "sec", "tac"}
    assert set(points) == with_tau | {"uniform", "mixed", "variance"}
    for label, keys in points.items():
        assert keys == {("policy.lr_scale", "policy.tau") if label in with_tau else ("policy.lr_scale",)}, label
    cells = tune.tuning_cells(spec)
    assert len(cells["harnessbandit"]) == 3 * 3 * 5 and len(cells["uniform"]) == 3 * 5


def test_a_grid_of_parts_tunes_its_tuned_part_on_the_train_target(tmp_path, capsys):
    """A part with [tune] (target train: the noise-free training success, no validation split)
    beside an untuned part: `hb grid run` tunes the one, tests both, and `hb grid status` and
    collect see the test phase; the arm with the best mean over the tuning seeds is tested."""
    env = {"kind": "bernoulli", "n_harnesses": 3, "n_tasks": 12, "n_heldout_tasks": 4, "k_attempts": 2}
    path = tmp_path / "parts.toml"
    path.write_text(f'name = "pp"\nsteps = 6\nseeds = 2\n'
                    f'[[parts]]\nname = "a"\nenv = {json.dumps(env).replace(":", " =")}\n'
                    'policies = [{name = "uniform"}]\n'
                    f'[[parts]]\nname = "b"\nenv = {json.dumps(env).replace(":", " =")}\n'
                    'policies = [{name = "fixed", label = "fixed"}]\n'
                    'tune = {seeds = [50, 51], target = "train", knobs = {"policy.arm" = [0, 1, 2]}}\n')
    spec = load_spec(path)
    assert tune.is_tuned(spec) and not spec.parts[0].tune and spec.parts[1].tune.target == "train"
    out = tmp_path / "out"
    assert hb_main(["grid", "run", str(path), "--out", str(out), "--jobs", "1"]) == 0
    printed = capsys.readouterr().out
    tuning = [read_meta(out / "tune" / "cells" / i) for i in done_ids(out / "tune")]
    assert len(tuning) == 3 * 2 and {m["seed"] for m in tuning} == {50, 51}
    from reports.readings.references import train_scores
    import pandas as pd
    train = pd.concat([pd.read_parquet(out / "tune" / "cells" / m["run_id"] / "train.parquet") for m in tuning])
    truth = train_scores(train.assign(policy=train["run_id"])).set_index("policy")["score"]
    means = {a: sum(truth[m["run_id"]] for m in tuning if m["config"]["policy"]["arm"] == a) / 2 for a in range(3)}
    best = max(means, key=lambda a: (means[a], -a))
    selection = json.loads((out / "tune.json").read_text())
    assert list(selection) == ["parts"] and selection["parts"]["b"]["designs"]["fixed"]["setting"] == \
        {"policy.arm": best}
    assert f"selected fixed in part b: policy.arm={best}  (train " in printed
    test = [read_meta(out / "cells" / i) for i in done_ids(out)]
    assert sorted((m["label"], m["seed"]) for m in test) == [("fixed[part=b]", 0), ("fixed[part=b]", 1),
                                                             ("uniform[part=a]", 0), ("uniform[part=a]", 1)]
    assert {m["config"]["policy"].get("arm") for m in test if m["policy"] == "fixed"} == {best}
    assert hb_main(["grid", "status", str(out)]) == 0
    assert "4 cells planned" in capsys.readouterr().out
