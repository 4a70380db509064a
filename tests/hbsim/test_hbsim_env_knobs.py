"""Environment knobs for the signal-validity study: the one shared oracle helper, the
held-out harness alignment, the presets (the reading note's Adam counterexample), and the
mixed-batch control (with Adam a mixed batch beats pure batches only through Adam's
normalisation; with SGD it does not)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hbsim import grpo
from hbsim.envs import ENV_PRESETS, expand_preset, make_env
from hbsim.envs.base import aligned_heldout
from hbsim.experiment import resolve_config, run_config

SMALL = {"n_tasks": 60, "n_heldout_tasks": 20}


@pytest.mark.parametrize("kind", list(grpo.ADVANTAGES))
@pytest.mark.parametrize("G", range(2, grpo.POLY_MAX_G + 3))
def test_expected_group_signal_equals_the_binomial_sum_by_hand(kind, G):
    p = np.array([0.0, 0.1, 0.37, 0.5, 0.93, 1.0])
    sig, keep = grpo.expected_group_signal(p, G, kind)
    s_y, s_1 = grpo.group_signal_table(G, kind)
    pmf = np.array([[math.comb(G, k) * q ** k * (1 - q) ** (G - k) for k in range(G + 1)] for q in p])
    np.testing.assert_allclose(sig, pmf @ s_y - p * (pmf @ s_1), atol=1e-12)
    np.testing.assert_allclose(keep, 1 - p ** G - (1 - p) ** G, atol=1e-14)
    if kind == "loo":
        np.testing.assert_allclose(sig, p * (1 - p), atol=1e-14)


def test_every_env_uses_the_one_oracle_helper():
    import hbsim.envs.bernoulli as b
    import hbsim.envs.drifting as d
    import hbsim.envs.student as s
    assert not hasattr(b.BernoulliEnv, "_binomial_moments")
    assert d.expected_group_signal is grpo.expected_group_signal is s.expected_group_signal
    assert d.Optimizer is grpo.Optimizer is s.Optimizer


def test_aligned_heldout_by_hand_and_default_is_identity():
    v = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 2.0]])
    assert aligned_heldout(v, {"heldout_align": "", "heldout_align_strength": 0.9}) is v
    out = aligned_heldout(v, {"heldout_align": "0,1", "heldout_align_strength": 0.6}, unit=False)
    np.testing.assert_allclose(out[-1], 0.6 * np.array([0.5, 0.5]) + 0.8 * np.array([0.0, 2.0]))
    np.testing.assert_array_equal(out[:-1], v[:-1])
    with pytest.raises(ValueError, match="heldout_align='3'"):
        aligned_heldout(v, {"heldout_align": "3", "heldout_align_strength": 0.5})


def test_alignment_makes_transfer_to_the_heldout_harness_real():
    b = make_env("bernoulli", seed=0, heldout_align="2", heldout_align_strength=1.0, **SMALL)
    np.testing.assert_array_equal(b.M[:, -1], b.M[:, 2])
    np.testing.assert_array_equal(b.w[:, -1], b.w[:, 2])
    s = make_env("student", seed=0, heldout_align="1", heldout_align_strength=1.0, **SMALL)
    np.testing.assert_array_equal(s.v[-1], s.v[1])
    for kind in ("drifting", "student"):
        cos = {}
        for align in ("", "0"):
            env = make_env(kind, seed=0, heldout_align=align, heldout_align_strength=1.0, **SMALL)
            d = env.true_directions()
            cos[align] = d[0] @ d[-1] / np.linalg.norm(d[0]) / np.linalg.norm(d[-1])
        assert cos["0"] > cos[""] + 0.2, (kind, cos)


def test_presets_expand_and_are_overridable():
    assert set(ENV_PRESETS) >= {"adam-counterexample", "sgd-control", "aligned-heldout"}
    env = make_env("adam-counterexample", seed=0)
    assert env.kind == "drifting" and env.knobs["optimizer"] == "adam" and env.knobs["shared_v0"] == 100.0
    cfg = resolve_config({"env": {"kind": "sgd-control", "lr": 0.2}})
    assert cfg["env"]["kind"] == "drifting" and cfg["env"]["optimizer"] == "sgd" and cfg["env"]["lr"] == 0.2
    assert expand_preset({"kind": "student", "lr": 1.0}) == {"kind": "student", "lr": 1.0}
    with pytest.raises(ValueError, match="presets: adam-counterexample"):
        make_env("nope")
    with pytest.raises(ValueError, match="shared_v0"):
        make_env("drifting", shared_v0=1.0)


def test_adam_counterexample_gradient_cosines_agree_while_updates_conflict():
    share = {}
    for preset in ("adam-counterexample", "sgd-control"):
        res = run_config({"env": {"kind": preset, **SMALL}, "policy": {"name": "round_robin"}, "seed": 0,
                          "steps": 40, "counterfactual": 1})
        cf = res.counterfactual[res.counterfactual["step"] > 10].dropna(subset=["t_grad", "t_update"])
        share[preset] = float(((cf["t_grad"] > 0) & (cf["t_update"] < 0)).mean())
        if preset == "sgd-control":       # SGD: the update is -lr * gradient, both T are one
            np.testing.assert_allclose(cf["t_update"], cf["t_grad"], atol=1e-5)
    assert share["adam-counterexample"] > 0.5 and share["sgd-control"] == 0.0


def test_mixed_beats_pure_only_through_adams_normalisation():
    """Mixed (every harness each step) vs round robin (pure, same harnesses, same number of
    groups per harness over 6 steps), same optimizer from the same state: noise-free held-out
    success after 60 steps."""
    diff = {}
    for opt, lr in (("adam", 0.005), ("sgd", 0.15)):
        d = []
        for seed in range(3):
            final = {}
            for pol in ("mixed", "round_robin"):
                res = run_config({"env": {"kind": "drifting", "optimizer": opt, "lr": lr, **SMALL},
                                  "policy": {"name": pol}, "seed": seed, "steps": 60})
                final[pol] = res.train["true_heldout_tasks"].iloc[-1]
            d.append(final["mixed"] - final["round_robin"])
        diff[opt] = np.array(d)
    assert (diff["adam"] > 0.01).all(), diff
    assert (np.abs(diff["sgd"]) < 0.002).all(), diff
