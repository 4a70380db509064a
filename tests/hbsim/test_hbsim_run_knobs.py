"""The run knobs and the one `--set` grammar (hbsim.run_knobs): hand-written values, each
run knob's one parse named as the user typed it, and the same answer from every command
(hb sim, a grid file, hb real native and --backend trl, a validity study)."""
from __future__ import annotations

import argparse

import pytest

from ablations import sim_cli, validity_cli
from ablations.spec import parse_spec
from hbsim.contract.records import config_hash
from hbsim.run_knobs import RUN_KNOBS, Sets, flag, run_values, seed_list, split_sets
from policies.errors import UserError
from policies.validate import parse_value
from real_runs import cli as real_cli
from real_runs.integrations import trl_run


def parsed(module, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    return parser.parse_args(argv)


# -- the value grammar -------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [
    ("3", 3), ("-2", -2), ("0.5", 0.5), ("1e-4", 1e-4), ("2.0", 2.0),
    ("true", True), ("false", False),
    ("rank", "rank"), ('"3"', "3"), ("groups:150,300", "groups:150,300"), ("0-1,2-3", "0-1,2-3"),
    ("[0, 1]", [0, 1]), ("[0.25,0.75]", [0.25, 0.75]), ('["json", "xml"]', ["json", "xml"]),
    ("none", None), ("None", None), ("null", None),
    ('{"unit": "groups", "at": [150]}', {"unit": "groups", "at": [150]}),
    ("  0.5 ", 0.5), (" rank ", "rank"), ("", ""),
])
def test_parse_value_hand_cases(text, value):
    got = parse_value(text)
    assert got == value and type(got) is type(value)


def test_split_sets_routes_each_key_form():
    sets = split_sets(["env.lr=0.5", "task_lr=0.25", "policy.tau=0.1", "policy.arms=[0, 2]", "eval_budget=groups:9",
                       "policy.tau=0.2"], run_keys=("eval_budget",))
    assert sets == Sets(env={"lr": 0.5, "task_lr": 0.25}, policy={"tau": 0.2, "arms": [0, 2]},
                        run={"eval_budget": "groups:9"})                     # a repeated key keeps its last value
    assert split_sets([]) == Sets()


@pytest.mark.parametrize("items, run_keys, needle", [
    (["lr"], (), "--set 'lr' is not allowed: expected KEY=VALUE"),
    (["=1"], (), "expected KEY=VALUE"),
    (["policy.=1"], (), "--set policy.=... is not allowed: expected policy.KNOB=VALUE"),
    (["env.=1"], (), "expected env.KNOB=VALUE"),
    (["seed=3"], ("eval_budget",), "--set seed=... is not allowed here: the run knobs --set takes here are eval_budget"),
    (["steps=3"], (), "the run knobs --set takes here are none"),
])
def test_split_sets_refusals(items, run_keys, needle):
    with pytest.raises(UserError) as exc:
        split_sets(items, run_keys)
    assert str(exc.value) == needle or needle in str(exc.value)


# -- one parse per run knob, named as typed ------------------------------------------------
@pytest.mark.parametrize("key, bad, good, canonical", [
    ("eval_every", 0, 5, 5),
    ("eval_budget", "foo", "groups:300, 150", "groups:150,300"),
    ("counterfactual", 0, 2, 2),
    ("batch_groups", 0, 4, 4),
    ("steps", 0, 7, 7),
    ("seeds", 0, 3, 3),
    ("seed", -1, 11, 11),
])
def test_each_run_knob_parses_once_and_names_the_form(key, bad, good, canonical):
    assert flag(key) == "--" + key.replace("_", "-")
    assert run_values(flags={key: good}) == run_values(sets={key: good}) == {key: canonical}
    assert run_values(flags={key: None}) == {}                                  # a flag not typed
    with pytest.raises(UserError, match=rf"^{flag(key)}={bad!r} is "):
        run_values(flags={key: bad})
    with pytest.raises(UserError, match=rf"^{key}={bad!r} is "):
        run_values(sets={key: bad})
    with pytest.raises(UserError, match=rf"^{flag(key)} and --set {key}=\.\.\. are not allowed together"):
        run_values(flags={key: good}, sets={key: good})
    assert RUN_KNOBS[key].check(key, canonical) == canonical                  # the parse is idempotent


def test_run_values_refuses_an_unknown_knob():
    with pytest.raises(UserError, match="the run config has no knob 'stpes'; valid knobs: seed, steps"):
        run_values(sets={"stpes": 3})


def test_seed_list():
    assert seed_list("seeds", 3) == [0, 1, 2]
    assert seed_list("seeds", [7, 2]) == [7, 2]
    for value, needle in [([1, 1], "seeds=[1, 1] is not allowed: expected a count or a non-empty list of distinct"),
                          ([], "seeds=[] is not allowed"), ([0, 2.5], "seeds[1]=2.5 is not allowed"),
                          (0, "seeds=0 is not allowed"), (list(range(10_001)), "a list of 10001 seeds is not allowed")]:
        with pytest.raises(UserError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            seed_list("seeds", value)
    with pytest.raises(UserError, match=r"tune.seeds=3 is not allowed: expected a non-empty list of distinct seeds"):
        seed_list("tune.seeds", 3, count=False)


# -- the same answer from every command ----------------------------------------------------
SIM_SETS = ["--set", "env.lr=0.5", "--set", "task_lr=0.25", "--set", "policy.tau=0.2",
            "--set", "eval_budget=groups:300,150", "--set", "counterfactual=2"]


def test_hb_sim_set_equals_flags_and_the_grid_file():
    by_set, _ = sim_cli.build_configs(parsed(sim_cli, ["--policy", "harnessbandit", "--seeds", "2", "--steps", "9",
                                                       *SIM_SETS]))
    by_flag, _ = sim_cli.build_configs(parsed(sim_cli, [
        "--policy", "harnessbandit", "--set", "seeds=2", "--set", "steps=9", "--set", "env.lr=0.5",
        "--set", "env.task_lr=0.25", "--set", "policy.tau=0.2", "--eval-budget", "groups:150,300",
        "--counterfactual", "2"]))
    grid = parse_spec({"name": "g", "steps": 9, "seeds": 2, "eval_budget": "groups:150,300", "counterfactual": 2,
                       "env": {"kind": "bernoulli", "lr": 0.5, "task_lr": 0.25},
                       "policies": [{"name": "harnessbandit", "tau": 0.2, "label": "harnessbandit"}]})
    assert [config_hash(c) for c in by_set] == [config_hash(c) for c in by_flag] == [c.id for c in grid.cells()]
    cfg = by_set[0]
    assert (cfg["env"]["lr"], cfg["env"]["task_lr"], cfg["policy"]["tau"]) == (0.5, 0.25, 0.2)
    assert (cfg["eval_budget"], cfg["counterfactual"], cfg["steps"], [c["seed"] for c in by_set]) == \
        ("groups:150,300", 2, 9, [0, 1])


@pytest.mark.parametrize("argv, needle", [
    (["--eval-budget", "foo"], "--eval-budget='foo' is not allowed"),
    (["--set", "eval_budget=foo"], "eval_budget='foo' is not allowed"),
    (["--eval-every", "0"], "--eval-every=0 is not allowed"),
    (["--set", "eval_every=0"], "eval_every=0 is not allowed"),
    (["--counterfactual", "0"], "--counterfactual=0 is not allowed"),
    (["--set", "counterfactual=0"], "counterfactual=0 is not allowed"),
    (["--batch-groups", "0"], "--batch-groups=0 is not allowed"),
    (["--set", "batch_groups=0"], "batch_groups=0 is not allowed"),
    (["--steps", "3", "--set", "steps=4"], "--steps and --set steps=... are not allowed together"),
    (["--set", "seed=1"], "--set seed=... is not allowed here"),
])
def test_hb_sim_errors_name_what_was_typed(argv, needle):
    with pytest.raises(UserError) as exc:
        sim_cli.build_configs(parsed(sim_cli, ["--policy", "uniform", "--seeds", "1", *argv]))
    assert str(exc.value).startswith(needle)


def test_a_grid_file_names_the_key():
    with pytest.raises(UserError, match=r"^<grid>: key 'eval_budget': eval_budget='foo' is not allowed"):
        parse_spec({"name": "g", "steps": 3, "seeds": 1, "eval_budget": "foo", "env": {"kind": "bernoulli"}, "policies": [{"name": "uniform"}]})


REAL = ["--preset", "tiny", "--policy", "harnessbandit", "--steps", "3", "--out", "unused"]


def test_hb_real_native_set_forms_agree_and_match_hb_sim():
    bare = real_cli.build_config(parsed(real_cli, [*REAL, "--set", "lr=0.0005", "--set", "policy.tau=0.2",
                                                   "--set", "eval_budget=groups:300,150", "--eval-every", "2"]))
    scoped = real_cli.build_config(parsed(real_cli, [*REAL, "--set", "env.lr=5e-4", "--set", "policy.tau=0.2",
                                                     "--set", "eval_budget={\"unit\": \"groups\", \"at\": [150, 300]}",
                                                     "--set", "eval_every=2"]))
    assert config_hash(bare) == config_hash(scoped)
    assert (bare["env"]["lr"], bare["policy"]["tau"], bare["eval_budget"], bare["eval_every"], bare["steps"]) == \
        (0.0005, 0.2, "groups:150,300", 2, 3)


@pytest.mark.parametrize("argv, needle", [
    (["--set", "eval_budget=foo"], "eval_budget='foo' is not allowed"),
    (["--eval-every", "0"], "--eval-every=0 is not allowed"),
    (["--set", "eval_every=0"], "eval_every=0 is not allowed"),
    (["--eval-every", "2", "--set", "eval_every=3"], "--eval-every and --set eval_every=... are not allowed together"),
    (["--set", "counterfactual=1"], "--set counterfactual=... is not allowed here: the run knobs --set takes here "
                                    "are batch_groups, eval_every, eval_budget"),
])
@pytest.mark.parametrize("backend", ["native", "trl"])
def test_hb_real_errors_name_what_was_typed(argv, needle, backend):
    args = parsed(real_cli, [*REAL, "--backend", backend, *argv])
    with pytest.raises(UserError) as exc:
        real_cli.build_config(args) if backend == "native" else trl_run.settings(args)
    assert str(exc.value).startswith(needle)


def test_hb_real_trl_set_forms_agree():
    def settings(*sets):
        return trl_run.settings(parsed(real_cli, [*REAL, "--backend", "trl", *sets]))

    bare, policy, run = settings("--set", "lr=0.0005", "--set", "batch_groups=4", "--set", "eval_budget=groups:8,4")
    scoped, _, run2 = settings("--set", "env.lr=5e-4", "--set", "env.batch_groups=4", "--eval-every", "2",
                               "--set", "eval_budget=groups:4,8")
    assert bare == scoped and (bare.lr, bare.batch_groups) == (0.0005, 4)
    assert run == {"steps": 3, "seed": 0, "eval_budget": "groups:4,8"}
    assert run2 == {**run, "eval_every": 2}
    assert policy["name"] == "harnessbandit"


def test_a_validity_study_reads_the_run_knobs_like_a_grid(tmp_path):
    study = tmp_path / "s.toml"
    study.write_text('steps = 9\nseeds = [3, 5]\ncounterfactual = 2\nbatch_groups = 4\nenvs = ["bernoulli"]\n'
                     '[env]\nlr = 0.5\n[[policies]]\nname = "uniform"\n')
    configs = [cfg for _, cfg in validity_cli.study_configs(str(study))]
    grid = parse_spec({"name": "g", "steps": 9, "seeds": [3, 5], "counterfactual": 2, "batch_groups": 4,
                       "env": {"kind": "bernoulli", "lr": 0.5}, "policies": [{"name": "uniform", "label": "uniform"}]})
    assert [config_hash(c) for c in configs] == [c.id for c in grid.cells()]
    study.write_text(study.read_text().replace("steps = 9", "steps = 0"))
    with pytest.raises(UserError, match=r"s.toml: steps=0 is not allowed"):
        validity_cli.study_configs(str(study))
