"""The group filter in the synthetic envs: a no-op band changes nothing, a real band keeps
exactly the groups it names (and refills the batch from fresh rounds), and configs record
the filter knobs only when set."""
import numpy as np
import pandas as pd

from hbsim.envs import make_env
from hbsim.experiment import resolve_config, run_config
from hbsim.contract.records import config_hash
from hbsim.sampling import GroupFilter
from policies import Allocation

SMALL = {"kind": "bernoulli", "n_tasks": 40, "n_heldout_tasks": 10}


def _frames(env, steps=12):
    res = run_config({"env": env, "policy": {"name": "harnessbandit", "warmup_rounds": 1}, "steps": steps,
                      "eval_every": 6})
    drop = [c for c in res.train if c.startswith("seconds_") or c in ("run_id", "overhead_frac")]
    return res.train.drop(columns=drop), res.eval.drop(columns=["run_id"]), res.meta["config"]


def test_noop_band_is_bit_identical_and_default_config_hashes_as_before():
    train, evals, cfg = _frames(SMALL)
    band_train, band_evals, band_cfg = _frames({**SMALL, "keep_band": [0.0, 1.0]})
    pd.testing.assert_frame_equal(train, band_train)
    pd.testing.assert_frame_equal(evals, band_evals)
    assert "keep_band" not in cfg["env"] and "min_abs_adv" not in cfg["env"]
    assert band_cfg["env"]["keep_band"] == "0.0,1.0"
    spelled = resolve_config({"env": {**SMALL, "keep_band": "", "min_abs_adv": 0}})
    assert config_hash(spelled) == config_hash(resolve_config({"env": SMALL}))


def _spied(env):
    seen = {"generated": [], "learned": []}
    generate, learn = env._generate, env._learn

    def spy_generate(requests, before):
        out = generate(requests, before)
        seen["generated"].extend(rewards for _, rewards in out.values())
        return out

    def spy_learn(batch, rng):
        seen["learned"].append(batch.rewards.copy())
        return learn(batch, rng)

    env._generate, env._learn = spy_generate, spy_learn
    return seen


SMALL_KNOBS = {k: v for k, v in SMALL.items() if k != "kind"}


def test_band_keeps_exactly_the_groups_in_band_and_refills():
    default = make_env("bernoulli", seed=3, **SMALL_KNOBS)
    band = make_env("bernoulli", seed=3, keep_band="0.25,0.75", **SMALL_KNOBS)
    a, b = _spied(default), _spied(band)
    alloc = Allocation.pure(2, 6, 8)
    ra, rb = default.train_step(alloc), band.train_step(alloc)
    # the first round is the same draw in both (common random numbers)
    np.testing.assert_array_equal(a["generated"][0], b["generated"][0])
    everything = np.concatenate(b["generated"])
    mean = everything.mean(axis=1)
    passing = (everything != everything[:, :1]).any(axis=1) & (mean >= 0.25) & (mean <= 0.75)
    assert rb.cost.groups_retained == int(passing.sum()) and rb.cost.groups_generated == len(everything)
    learned = b["learned"][0].mean(axis=1)
    assert len(learned) == rb.cost.groups_optimized and ((learned >= 0.25) & (learned <= 0.75)).all()
    # the default batch holds groups outside the band that the band drops
    assert ((a["learned"][0].mean(axis=1) < 0.25) | (a["learned"][0].mean(axis=1) > 0.75)).any()
    np.testing.assert_array_equal(rb.generated[2], [everything.size, everything.sum()])
    assert rb.generated[[0, 1, 3, 4, 5]].sum() == 0
    assert band._sampler.filter == GroupFilter("0.25,0.75", 0.0, "loo")
    assert rb.cost.groups_generated > ra.cost.groups_generated      # the narrower filter needed more rounds


def test_bad_filter_knob_is_one_line_exit_2(capsys):
    from hbsim.cli import main
    for bad, needle in (("env.keep_band=[0.8,0.2]", "env.keep_band=[0.8, 0.2] is not allowed: expected a band"),
                        ("env.min_abs_adv=-1", "env.min_abs_adv=-1 is out of range")):
        assert main(["sim", "--policy", "uniform", "--set", bad, "--seeds", "1", "--steps", "2", "--jobs", "1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
