"""The one loop, run records and run_config."""
import hashlib
import json

import numpy as np
import pandas as pd
import pytest

import hbsim
from hbsim.envs import make_env
from hbsim.contract.records import canonical_json, config_hash, read_run, write_run
from policies import POLICIES, Feedback, make
from policies.errors import UserError
from policies.simple import Uniform
from run_checks import check_regret

ENV = dict(n_tasks=40, n_heldout_tasks=5)


def frames_equal(a: pd.DataFrame, b: pd.DataFrame):
    cols = [c for c in a.columns if not c.startswith("seconds_")]
    pd.testing.assert_frame_equal(a[cols], b[cols])


class Spy(Uniform):
    """Uniform policy that records its feedback."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen: list[Feedback] = []

    def update(self, feedback):
        self.seen.append(feedback)
        super().update(feedback)


def test_train_row_columns_and_values():
    env = make_env("bernoulli", seed=0, **ENV)
    pol = make("harnessbandit", n_arms=6, seed=0)
    res = hbsim.run(pol, env, 12, label="hb", seed=0)
    tr = res.train
    hs = env.harnesses
    required = (["run_id", "policy", "seed", "step", "arm", "learnability", "transfer", "l_norm", "t_norm",
                 "score", "reward"] + [f"{p}_{h}" for p in ("p", "q", "n", "mem_norm", "mem_age", "alloc") for h in hs]
                + ["groups_generated", "groups_scored", "groups_retained", "groups_optimized", "leftover_used",
                   "leftover_age", "leftover_size", "tokens", "seconds_rollout", "seconds_scheduler",
                   "oracle_arm", "regret"] + [f"true_{h}" for h in hs + ["hx"]])
    assert set(required) <= set(tr.columns)
    assert tr.step.tolist() == list(range(1, 13)) and (tr.policy == "hb").all()
    assert tr.run_id.nunique() == 1 and tr.run_id.iloc[0] == res.meta["run_id"]
    np.testing.assert_allclose(tr[[f"p_{h}" for h in hs]].sum(axis=1), 1.0)
    assert (tr[[f"alloc_{h}" for h in hs]].sum(axis=1) == 8).all()
    # warm-up is round robin: arm = t mod H, one-hot p, n counts visits after the update
    assert tr.arm.tolist() == [i % 6 for i in range(12)]
    assert tr.loc[0, "p_h0"] == 1.0 and tr.loc[11, "n_h5"] == 2 and tr.loc[0, "n_h0"] == 1
    check_regret(tr)
    assert (tr.seconds_scheduler > 0).all()
    # the zero-success harness may yield no retained group: L and the sketch are missing
    got = tr.groups_optimized > 0
    assert tr.learnability[got].between(0, 4 / 7).all() and tr.learnability[~got].isna().all()
    # transfer exists once a second memory exists (and the step had a sketch)
    assert np.isnan(tr.loc[0, "transfer"]) and np.isfinite(tr.transfer[got].iloc[1:]).all()
    ev = res.eval
    assert ev.step.unique().tolist() == [12]
    assert list(ev.columns[:4]) == ["run_id", "policy", "seed", "step"]


def test_feedback_matches_step_result():
    env = make_env("bernoulli", seed=1, **ENV)
    spy = Spy(n_arms=6, seed=1)
    res = hbsim.run(spy, env, 5, seed=1)
    for fb, (_, row) in zip(spy.seen, res.train.iterrows()):
        assert fb.arm == row.arm
        assert fb.learnability == pytest.approx(row.learnability)
        assert fb.cost == pytest.approx(row.groups_generated / row.groups_optimized)
        assert fb.counts[fb.arm] == 8 and fb.sketch is not None and fb.sketch.dtype == np.float32
        assert fb.reward == pytest.approx(row.reward)


def test_eval_schedule():
    env = make_env("bernoulli", seed=0, **ENV)
    res = hbsim.run(make("uniform", n_arms=6, seed=0), env, 5, eval_every=2)
    assert sorted(res.eval.step.unique()) == [0, 2, 4, 5]
    res0 = hbsim.run(make("uniform", n_arms=6, seed=0), make_env("bernoulli", seed=0, **ENV), 0)
    assert res0.train.empty and res0.eval.step.unique().tolist() == [0]


def test_mixed_through_the_same_loop():
    env = make_env("bernoulli", seed=0, **ENV)
    res = hbsim.run(make("mixed", n_arms=6, seed=0), env, 6, label="mixed6")
    assert (res.train.arm == -1).all()
    assert (res.train[[f"alloc_h{i}" for i in range(6)]].sum(axis=1) == 8).all()
    assert (res.train[[f"alloc_h{i}" for i in range(6)]] >= 1).all().all()
    check_regret(res.train)


@pytest.mark.parametrize("name", list(POLICIES))
def test_determinism_every_policy(name):
    a = hbsim.run_config({"env": ENV, "policy": {"name": name}, "seed": 2, "steps": 40})
    b = hbsim.run_config({"env": ENV, "policy": {"name": name}, "seed": 2, "steps": 40})
    frames_equal(a.train, b.train)
    frames_equal(a.eval, b.eval)
    pure = a.train[a.train.arm >= 0]                  # a pure step has no regret exactly when it picked the oracle
    np.testing.assert_array_equal(pure.regret == 0, pure.arm == pure.oracle_arm)
    # 40 steps: every policy misses the oracle sometimes, except the oracle (target train) itself
    assert (a.train.regret.sum() > 0) == (name != "oracle")


def test_crn_two_policies_same_seed():
    a = hbsim.run_config({"env": ENV, "policy": {"name": "uniform"}, "seed": 7, "steps": 10})
    b = hbsim.run_config({"env": ENV, "policy": {"name": "harnessbandit"}, "seed": 7, "steps": 10})
    key = ["suite", "task", "category", "harness", "attempt"]
    pd.testing.assert_frame_equal(a.eval[key], b.eval[key])
    e1, e2 = make_env("bernoulli", seed=7, **ENV), make_env("bernoulli", seed=7, **ENV)
    np.testing.assert_array_equal(e1.success_matrix(), e2.success_matrix())


@pytest.mark.parametrize("name", ["harnessbandit", "mixed", "uniform"])
def test_loop_state_round_trip_mid_run(name):
    def fresh():
        return hbsim.Loop(make(name, n_arms=6, seed=4), make_env("bernoulli", seed=4, **ENV),
                          label=name, seed=4, eval_every=5)

    full = fresh()
    full.run(20)
    a = fresh()
    a.run(20, checkpoint=lambda loop: loop.t == 8)      # stops after step 8, as a SIGTERM would
    assert a.t == 8 and sorted(a.result().eval.step.unique()) == [0, 5]
    state = a.state_dict()
    b = fresh()
    b.load_state_dict(state)
    b.run(20)
    ra, rb = full.result(), b.result()
    frames_equal(ra.train, rb.train)
    frames_equal(ra.eval, rb.eval)
    with pytest.raises(ValueError, match="does not match"):
        hbsim.Loop(make(name, n_arms=6, seed=4), make_env("bernoulli", seed=4, **ENV), label="x",
                   seed=4).load_state_dict(state)


def test_missing_learnability_flows_as_none():
    env = make_env("bernoulli", seed=0, n_harnesses=2, n_zero=2, n_saturating=0, zero_offset=-50.0, **ENV)
    spy = Spy(n_arms=2, seed=0)
    res = hbsim.run(spy, env, 3)
    assert all(fb.learnability is None and fb.cost is None for fb in spy.seen)
    assert res.train.learnability.isna().all() and (res.train.groups_optimized == 0).all()


# -- records ---------------------------------------------------------------------------
def test_config_hash_is_sha256_of_canonical_json():
    cfg = {"b": 1, "a": [1.5, None], "c": {"y": np.int64(2), "x": True}}
    text = '{"a":[1.5,null],"b":1,"c":{"x":true,"y":2}}'
    assert canonical_json(cfg) == text
    assert config_hash(cfg) == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_write_and_read_run(tmp_path):
    res = hbsim.run_config({"env": ENV, "policy": {"name": "round_robin"}, "seed": 1, "steps": 6})
    out = write_run(res, tmp_path / "run")
    assert sorted(p.name for p in out.iterdir()) == ["eval.parquet", "groups.parquet", "run.json", "train.parquet"]
    back = read_run(out)
    frames_equal(res.train, back.train)
    pd.testing.assert_frame_equal(res.groups, back.groups, check_dtype=False)
    pd.testing.assert_frame_equal(res.eval, back.eval, check_dtype=False)
    meta = json.loads((out / "run.json").read_text())
    assert set(meta) >= {"run_id", "config", "config_hash", "versions", "seed", "started", "finished",
                         "policy", "label", "steps"}
    assert meta["run_id"] == meta["config_hash"] == config_hash(meta["config"])
    assert meta["steps"] == 6 and meta["seed"] == 1 and meta["policy"] == "round_robin"
    assert set(meta["versions"]) >= {"python", "numpy", "pandas", "harnessbandit"}
    with pytest.raises(UserError, match="already holds a complete run"):
        write_run(res, out)
    write_run(res, out, overwrite=True)
    # an incomplete directory (e.g. a grid cell with its log) receives the files
    cell = tmp_path / "cell"
    cell.mkdir()
    (cell / "log.txt").write_text("log")
    write_run(res, cell)
    assert sorted(p.name for p in cell.iterdir()) == ["eval.parquet", "groups.parquet", "log.txt", "run.json", "train.parquet"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# -- configs ---------------------------------------------------------------------------
def test_resolve_config_fills_every_knob_and_is_stable():
    full = hbsim.resolve_config({"policy": {"name": "harnessbandit"}})
    assert full["env"]["kind"] == "bernoulli" and full["env"]["lr"] == 1.0
    assert full["policy"]["label"] == "harnessbandit" and full["policy"]["tau"] == 0.3
    assert (full["seed"], full["steps"], full["eval_every"], full["batch_groups"]) == (0, 150, None, 8)
    assert hbsim.resolve_config(full) == full
    spelled = hbsim.resolve_config({"env": {"kind": "bernoulli", "lr": 1.0}, "policy": {"name": "harnessbandit", "tau": 0.3}})
    assert config_hash(spelled) == config_hash(full)
    for bad, match in [({"sedd": 1}, "the run config has no knob 'sedd'; valid knobs: seed, steps"),
                       ({"policy": {"name": "nope"}}, "nope"),
                       ({"policy": {"name": "uniform", "tau": 1}}, "tau"), ({"env": {"kind": "x"}}, "valid kinds"),
                       ({"steps": -1}, "steps=-1"), ({"eval_every": 0}, "eval_every=0")]:
        with pytest.raises(ValueError, match=match):
            hbsim.resolve_config(bad)


def test_run_config_with_adapter_factory():
    built = []

    def factory(cfg):
        built.append(cfg)
        return make_env("bernoulli", seed=cfg["seed"], n_harnesses=3, n_tasks=20, n_heldout_tasks=3)

    res = hbsim.run_config({"env": {"kind": "real", "n_harnesses": 3}, "policy": {"name": "uniform", "label": "u"},
                            "seed": 5, "steps": 4}, adapter_factory=factory)
    assert built and built[0]["env"] == {"kind": "real", "n_harnesses": 3}
    assert res.meta["label"] == "u" and len(res.train) == 4 and (res.train.seed == 5).all()
    assert res.meta["config"]["env"]["kind"] == "real"


def test_step_timing_columns_and_overhead_fraction():
    res = hbsim.run(make("harnessbandit", n_arms=6, seed=0), make_env("bernoulli", seed=0, **ENV), 4, seed=0)
    tr = res.train
    assert (tr.seconds_step > 0).all() and (tr.seconds_step >= tr.seconds_scheduler).all()
    frame = pd.DataFrame({"seconds_sketch": [1.0, 0.0], "seconds_allreduce": [0.5, 0.0],
                          "seconds_scheduler": [0.5, 1.0], "seconds_step": [8.0, 0.0]})
    got = hbsim.loop.overhead_fraction(frame)
    assert got.iloc[0] == 0.25 and np.isnan(got.iloc[1])
    assert hbsim.loop.overhead_fraction(tr[["seconds_scheduler", "seconds_step"]]).between(0, 1).all()


def test_checkpoint_hook_stops_and_run_config_resumes_exactly():
    cfg = hbsim.resolve_config({"env": {"kind": "bernoulli", **ENV}, "steps": 7, "eval_every": 3, "seed": 2})
    full = hbsim.run_config(cfg)
    saved, calls = {}, []

    def hook(loop):
        calls.append(loop.t)
        if loop.t == 4:
            saved["state"] = loop.state_dict()
            return True                              # e.g. SIGTERM: stop after this step

    part = hbsim.run_config(cfg, checkpoint=hook)
    assert calls == [1, 2, 3, 4] and part.meta["steps"] == 4 and part.eval.step.max() == 3
    rest = hbsim.run_config(cfg, state=saved["state"])
    assert rest.meta["run_id"] == full.meta["run_id"]
    frames_equal(rest.train, full.train)
    pd.testing.assert_frame_equal(rest.eval, full.eval)
