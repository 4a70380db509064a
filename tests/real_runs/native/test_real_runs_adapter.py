"""GRPOAdapter end to end on the tiny preset: ledger, leftovers, learnability, sketch
timing, evaluation rows, and exact resume through the one loop.

The tiny warm-started model is far from solving tasks, so most groups would have zero
reward variance and be dropped. Tests that need gradient steps replace the checker with
a deterministic stand-in that varies with the sampled text (`_text_reward`); everything
else (sampling, harness control loops, parsing, the trainer) is the real code.
"""
import io

import numpy as np
import pandas as pd
import pytest
import torch

import hbsim
import real_runs
import real_runs.native.adapter as adapter_mod
import real_runs.native.trainer as trainer_mod
from hbsim.grpo import advantages, learnability
from policies import Allocation, make
from real_runs.world.episode import Episode
from real_runs.world.harnesses import HELDOUT_HARNESSES, TRAIN_HARNESSES
from state_equal import assert_state_equal

KNOBS = dict(preset="tiny", device="cpu", warm_steps=2, n_train_tasks=40, n_heldout_tasks=10, group_size=4,
             max_new_tokens=12, eval_tasks=2, eval_attempts=2, oversample=2.0, sketch_dim=4096)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("warm"))


def _text_reward(self):
    """Stand-in checker: a function of the episode's transcript with variance inside groups."""
    return (sum(map(ord, self.context())) % 3) / 2.0


@pytest.fixture
def fake_checker(monkeypatch):
    monkeypatch.setattr(Episode, "reward", _text_reward)


def _adapter(cache, **extra):
    return real_runs.make_adapter(0, **{**KNOBS, "cache_dir": cache, **extra})


def test_step_ledger_learnability_and_sketch_before_clipping(cache, fake_checker, monkeypatch):
    ad = _adapter(cache)
    seen = {}
    real_build, real_apply = adapter_mod.build_rows, trainer_mod.apply_update

    def spy_build(groups, kind):
        seen["rewards"] = np.stack([g.rewards for g in groups])
        return real_build(groups, kind)

    def spy_apply(model, optimizer, sketch, max_grad_norm):
        seen["grad_at_coords"] = sketch.grad().numpy().copy()   # what the step is about to clip
        return real_apply(model, optimizer, sketch, 1e-6)       # force clipping to be active

    monkeypatch.setattr(adapter_mod, "build_rows", spy_build)
    monkeypatch.setattr(trainer_mod, "apply_update", spy_apply)     # called by trainer.sketch_and_update
    res = ad.train_step(Allocation.pure(1, 6, 2))
    c = res.cost
    assert c.groups_generated == c.groups_scored == 4          # ceil(2 * oversample 2.0)
    assert c.groups_optimized == 2 and c.groups_retained >= 2
    assert c.leftover_size == c.groups_retained - 2 and c.leftover_used == 0
    assert c.tokens > 0 and all(c.seconds[k] > 0 for k in ("rollout", "tools", "backward", "sketch", "optimizer"))
    assert res.learnability == pytest.approx(learnability(advantages(seen["rewards"])), rel=1e-6)
    assert res.sketch.shape == (4096,) and res.sketch.dtype == np.float32
    np.testing.assert_array_equal(res.sketch, seen["grad_at_coords"])
    assert np.linalg.norm(res.update_sketch) > 0
    assert res.reward == pytest.approx(seen["rewards"].mean())


def test_leftovers_are_used_first_with_their_age(cache, fake_checker):
    ad = _adapter(cache, oversample=3.0)
    first = ad.train_step(Allocation.pure(0, 6, 1))
    assert first.cost.groups_generated == 3 and first.cost.leftover_size == first.cost.groups_retained - 1
    ad.train_step(Allocation.pure(2, 6, 1))      # another harness: buffer of harness 0 untouched
    third = ad.train_step(Allocation.pure(0, 6, 1))
    assert third.cost.leftover_used == 1 and third.cost.leftover_age == 2.0
    assert third.cost.groups_generated == 0


def test_evaluate_rows(cache):
    ev = _adapter(cache).evaluate()
    assert list(ev.columns) == ["suite", "task", "category", "harness", "attempt", "reward", "success"]
    inner = ev[ev.suite == "heldout_tasks"]
    assert len(inner) == 2 * 6 * 2 and inner.task.str.contains("@").all()
    assert set(inner.harness) == set(TRAIN_HARNESSES)
    outer = ev[ev.suite == "heldout_harness"]
    assert len(outer) == 2 * 2 and set(outer.harness) == set(HELDOUT_HARNESSES)
    assert ev.reward.between(0, 1).all() and (ev.success == (ev.reward >= 1)).all()


def _loop(cache, **extra):
    ad = _adapter(cache, **extra)
    pol = make("harnessbandit", n_arms=6, seed=0, warmup_rounds=0)
    return hbsim.Loop(pol, ad, label="hb", seed=0, batch_groups=2)


def _frames(loop):
    res = loop.result()
    timing = [c for c in res.train.columns if c.startswith("seconds_")]
    return res.train.drop(columns=timing), res.eval


def test_resume_gives_identical_tables(cache, fake_checker):
    straight = _loop(cache)
    straight.run(4)
    half = _loop(cache)
    for _ in range(2):   # killed after step 2, before any evaluation
        half.step()
    buf = io.BytesIO()
    torch.save(half.state_dict(), buf)
    buf.seek(0)
    resumed = _loop(cache)
    resumed.load_state_dict(torch.load(buf, weights_only=False))
    resumed.run(4)
    a, b = _frames(straight), _frames(resumed)
    assert a[0]["groups_optimized"].sum() > 0          # real optimizer steps happened
    pd.testing.assert_frame_equal(a[0], b[0])
    pd.testing.assert_frame_equal(a[1], b[1])
    for p, q in zip(straight.adapter.model.parameters(), resumed.adapter.model.parameters()):
        assert torch.equal(p, q)


def test_keep_band_filters_the_native_sampler_and_generated_counts_everything(cache, fake_checker, monkeypatch):
    """The native trainer's dynamic sampling uses the same group filter as the synthetic envs
    (`env.keep_band`): only groups whose mean reward is in the band are optimized, and
    `StepResult.generated` counts every generated rollout before filtering."""
    from hbsim.sampling import GroupFilter
    ad = _adapter(cache, keep_band=[0.4, 0.6], sample_rounds=3)
    assert ad._sampler.filter == GroupFilter("0.4,0.6", 0.0, "loo")
    assert ad.config()["keep_band"] == "0.4,0.6" and "keep_band" not in _adapter(cache).config()
    seen = {"generated": [], "optimized": []}
    real_generate, real_build = ad._generate, adapter_mod.build_rows

    def spy_generate(requests, ledger):
        out = real_generate(requests, ledger)
        seen["generated"].extend(rewards for _, rewards in out.values())
        return out

    def spy_build(groups, kind):
        seen["optimized"].append(np.stack([g.rewards for g in groups]) if groups else np.zeros((0, 4)))
        return real_build(groups, kind)

    monkeypatch.setattr(ad, "_generate", spy_generate)
    monkeypatch.setattr(adapter_mod, "build_rows", spy_build)
    res = ad.train_step(Allocation.pure(3, 6, 2))
    everything = np.concatenate(seen["generated"])              # rewards in {0, 0.5, 1} (the stand-in checker)
    mean = everything.mean(axis=1)
    varied = (everything != everything[:, :1]).any(axis=1)
    passing = varied & (mean >= 0.4) & (mean <= 0.6)
    assert res.cost.groups_generated == len(everything) and res.cost.groups_retained == int(passing.sum())
    optimized = seen["optimized"][0]
    assert len(optimized) == res.cost.groups_optimized == min(2, int(passing.sum())) >= 1
    assert (varied & ~passing).any()                          # the band dropped groups the default keeps
    assert ((optimized.mean(axis=1) >= 0.4) & (optimized.mean(axis=1) <= 0.6)).all()
    np.testing.assert_array_equal(res.generated[3], [everything.size, everything.sum()])
    assert res.generated[[0, 1, 2, 4, 5]].sum() == 0


def test_update_norm_is_the_parameter_delta_and_lr_scale_sets_adams_lr(cache, fake_checker):
    ad = _adapter(cache)
    ad.set_lr_scale(2.0)
    assert all(g["lr"] == 2.0 * ad.cfg.lr for g in ad.optimizer.param_groups)
    params = [p for p in ad.model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]
    res = ad.train_step(Allocation.pure(0, len(ad.harnesses), 2))
    delta = float(torch.sqrt(sum(((p.detach() - b).double() ** 2).sum() for p, b in zip(params, before))))
    assert res.cost.groups_optimized > 0 and delta > 0
    assert res.update_norm == pytest.approx(delta, rel=1e-9)
    ad.set_lr_scale(1.0)                                   # absolute, not cumulative
    assert all(g["lr"] == ad.cfg.lr for g in ad.optimizer.param_groups)


# -- the groups table and the what-if probe (hb real --counterfactual) -------------------
def test_real_groups_table_matches_the_ledger(cache, fake_checker):
    loop = _loop(cache)
    loop.run(3)
    res = loop.result()
    g, train = res.groups, res.train
    assert len(g) == train["groups_generated"].sum() and g["retained"].sum() == train["groups_retained"].sum()
    assert g.groupby("step")["cost"].sum().reindex(train["step"], fill_value=0).tolist() == train["tokens"].tolist()
    assert set(g["harness"]) <= set(TRAIN_HARNESSES) and (g["size"] == 4).all() and g["chosen"].all()
    assert ((g["reward_std"] > 0) == g["retained"]).all()


def test_the_real_probe_restores_model_optimizer_and_rng_bit_for_bit(cache, fake_checker):
    import copy

    from hbsim.counterfactual import Probe, probe_means
    loop = _loop(cache, probe_tasks=2)
    loop.run(2)
    state = copy.deepcopy(loop.adapter.state_dict())
    p_state = copy.deepcopy(loop.policy.state_dict())
    probe = Probe(3)
    probe(loop)                                           # probes step 3 from the state after step 2
    assert_state_equal(loop.adapter.state_dict(), state)
    np.testing.assert_equal(loop.policy.state_dict(), p_state)
    cf = probe.frame()
    assert cf["arm"].tolist() == [0, 1, 2, 3, 4, 5, -1] and cf["harness"].iloc[-1] == "mixed"
    unknown = ["gain_train", "gain_heldout_tasks", "gain_heldout_harness", "true_t", "real_train",
               *[f"cos_{h}" for h in TRAIN_HARNESSES]]
    assert cf[unknown].isna().all().all()               # what a real run cannot know
    names = [*TRAIN_HARNESSES, *HELDOUT_HARNESSES]
    assert cf[["real_heldout_tasks", "real_heldout_harness", *[f"delta_{h}" for h in names]]].notna().all().all()
    # a row by hand: the paired evaluation before and after the what-if step on harness 2
    before = probe_means(loop.adapter, 3)
    loop.adapter.train_step(Allocation.pure(2, 6, 2))
    after = probe_means(loop.adapter, 3)
    row = cf[cf["arm"] == 2].iloc[0]
    for key in before:
        if key != "real_train":
            assert row[key] == after[key] - before[key]
    loop.adapter.load_state_dict(state)


def test_a_real_run_with_the_probe_equals_the_run_without_it(cache, fake_checker):
    def run(counterfactual):
        loop = _loop(cache, probe_tasks=1)
        return hbsim.run(loop.policy, loop.adapter, 3, label="hb", seed=0, batch_groups=2,
                         counterfactual=counterfactual)
    plain, probed = run(None), run(2)
    timing = [c for c in plain.train.columns if c.startswith("seconds_")]
    pd.testing.assert_frame_equal(plain.train.drop(columns=timing), probed.train.drop(columns=timing))
    pd.testing.assert_frame_equal(plain.eval, probed.eval)
    pd.testing.assert_frame_equal(plain.groups, probed.groups)
    assert plain.counterfactual is None and sorted(probed.counterfactual["step"].unique()) == [2]


def test_probe_tasks_zero_measures_nothing(cache):
    means = _adapter(cache, probe_tasks=0).probe_means(3)
    names = [*TRAIN_HARNESSES, *HELDOUT_HARNESSES]
    assert list(means) == ["real_train", "real_heldout_tasks", "real_heldout_harness", *[f"delta_{h}" for h in names]]
    assert all(np.isnan(v) for v in means.values())


def test_the_sampler_knob_reaches_rollouts_evaluations_and_probes(cache, monkeypatch):
    """`sampler=inverse_cdf`: every token of a training step, an evaluation and a what-if
    probe is drawn by it (a spy on `model.draw`); the default draws by multinomial."""
    import real_runs.native.model as model_mod
    used = []
    real_draw = model_mod.draw

    def spy(probs, generator, sampler="multinomial"):
        used.append(sampler)
        return real_draw(probs, generator, sampler)

    monkeypatch.setattr(model_mod, "draw", spy)
    for knob in ("inverse_cdf", "multinomial"):
        used.clear()
        ad = _adapter(cache, **({"sampler": knob} if knob != "multinomial" else {}), probe_tasks=1)
        ad.train_step(Allocation.pure(1, 6, 1))
        steps = len(used)
        ad.evaluate()
        evaluated = len(used)
        ad.probe_means(0)
        assert 0 < steps < evaluated < len(used) and set(used) == {knob}
