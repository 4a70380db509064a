"""`--counterfactual`: what-if pure steps on every harness that leave the run unchanged bit for
bit, their rows (counterfactual.parquet), and the truths they log."""
from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

import hbsim
from hbsim.counterfactual import Probe, cosine_matrix, target_means, transfer_against
from hbsim.envs import make_env
from hbsim.experiment import resolve_config, run_config
from hbsim.loop import Loop, normalised_entropy
from hbsim.contract.records import config_hash, read_run, write_run
from policies import Allocation, make
from policies.signals import MemoryBank, transfer_and_update

SMALL = {"n_tasks": 40, "n_heldout_tasks": 10, "k_attempts": 2}


def _cfg(kind: str, policy: str, **top) -> dict:
    return {"env": {"kind": kind, **SMALL}, "policy": {"name": policy, "warmup_rounds": 1}
            if policy not in ("mixed", "uniform") else {"name": policy}, "seed": 3, "steps": 14, "eval_every": 7,
            **top}


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    cols = [c for c in a.columns if not c.startswith("seconds_") and c != "run_id"]
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)


@pytest.mark.parametrize("kind", ["bernoulli", "drifting", "student", "scenario"])
@pytest.mark.parametrize("policy", ["harnessbandit", "mixed"])
def test_a_run_with_the_probe_equals_the_run_without_it_bit_for_bit(kind, policy):
    plain = run_config(_cfg(kind, policy))
    probed = run_config(_cfg(kind, policy, counterfactual=1))
    _same(plain.train, probed.train)
    _same(plain.eval, probed.eval)
    assert plain.counterfactual is None
    cf = probed.counterfactual
    assert len(cf) == 14 * 7 and (cf["run_id"] == probed.meta["run_id"]).all()
    assert cf.groupby("step")["arm"].apply(list).map(lambda a: a == [*range(6), -1]).all()
    assert (cf.loc[cf["arm"] == -1, "harness"] == "mixed").all()


def test_the_probe_restores_policy_and_adapter_state_exactly():
    env = make_env("drifting", seed=1, **SMALL)
    pol = make("harnessbandit", n_arms=6, seed=1, warmup_rounds=1)
    loop = Loop(pol, env, seed=1)
    for _ in range(8):
        loop.step()
    before_p, before_a = pol.state_dict(), env.state_dict()
    Probe(1)(loop)
    after_p, after_a = pol.state_dict(), env.state_dict()
    np.testing.assert_equal(after_p, before_p)
    np.testing.assert_equal(after_a, before_a)


def test_the_mixed_probe_row_by_hand():
    """The mixed row (arm -1): the even split of the batch over every harness, its true gain
    from `target_gains`, its realised change and per-harness deltas from the true success
    matrix, the policy's columns NaN; the pure rows' delta_<harness> by hand too."""
    env = make_env("bernoulli", seed=4, **SMALL)
    pol = make("uniform", n_arms=6, seed=4)
    loop = Loop(pol, env, seed=4)
    for _ in range(3):
        loop.step()
    probe = Probe(1)
    state = env.state_dict()
    counts = np.array([2, 2, 1, 1, 1, 1])                       # even_split(6 arms, 8 groups, t=3)
    gains = {t: env.target_gains(counts[None, :], t)[0] for t in ("train", "heldout_tasks", "heldout_harness")}
    before = env.success_matrix().copy()
    probe(loop)
    np.testing.assert_equal(env.state_dict(), state)
    cf = probe.frame()
    mixed = cf[cf["arm"] == -1].iloc[0]
    assert mixed["harness"] == "mixed" and math.isnan(mixed["prob"]) and math.isnan(mixed["q"])
    for t, g in gains.items():
        assert mixed[f"gain_{t}"] == pytest.approx(g, rel=1e-9, abs=1e-15)
    env.load_state_dict(state)
    env.train_step(Allocation(counts))
    after = env.success_matrix()
    expect = target_means(after, env.n_tasks, 6) - target_means(before, env.n_tasks, 6)
    assert [mixed[f"real_{t}"] for t in ("train", "heldout_tasks", "heldout_harness")] == pytest.approx(expect.tolist())
    names = [*env.harnesses, env.heldout_harness]
    for j, name in enumerate(names):
        assert mixed[f"delta_{name}"] == pytest.approx(after[env.n_tasks:, j].mean() - before[env.n_tasks:, j].mean())
    pure = cf[cf["arm"] >= 0]
    assert np.allclose(pure[[f"delta_{n}" for n in env.harnesses]].mean(axis=1),
                       pure["real_heldout_tasks"], rtol=0, atol=1e-12)   # the suite is the harnesses' mean


def test_transfer_to_all_by_hand():
    from hbsim.counterfactual import transfer_to_all
    bank = MemoryBank(3, 2)
    transfer_and_update(bank, 0, np.array([0.0, 2.0]), 0.3, 1)
    transfer_and_update(bank, 2, np.array([3.0, 0.0]), 0.3, 2)
    assert transfer_to_all(bank, np.array([1.0, 1.0])) == pytest.approx(1 / math.sqrt(2))
    assert transfer_to_all(bank, np.array([1.0, 0.0])) == pytest.approx(0.5)    # cos 90 and cos 0
    assert math.isnan(transfer_to_all(bank, np.zeros(2))) and math.isnan(transfer_to_all(None, np.ones(2)))


def test_every_k_probes_only_steps_divisible_by_k():
    res = run_config(_cfg("bernoulli", "uniform", counterfactual=5))
    assert sorted(res.counterfactual["step"].unique()) == [5, 10]


@pytest.mark.parametrize("kind", ["bernoulli", "drifting", "student", "scenario"])
def test_gain_train_is_the_oracles_pure_gain_and_target_means_by_hand(kind):
    env = make_env(kind, seed=2, **SMALL)
    hbsim.run(make("round_robin", n_arms=6, seed=2), env, 9, seed=2)
    pure = np.eye(6, dtype=np.int64) * 8
    expected = env.expected_success(pure)                                   # (6, n_all, 7)
    gains = target_means(expected, env.n_tasks, 6) - target_means(env.success_matrix(), env.n_tasks, 6)
    np.testing.assert_allclose(gains[:, 0], env.expected_gains(pure), rtol=1e-9, atol=1e-15)
    s = np.arange(12.0).reshape(4, 3) / 12                                   # 2 train + 2 held-out tasks, H = 2
    np.testing.assert_allclose(target_means(s, 2, 2), [(0 + 1 + 3 + 4) / 48, (6 + 7 + 9 + 10) / 48, (8 + 11) / 24])


def test_cosine_matrix_and_transfer_against_a_copy_by_hand():
    cos = cosine_matrix(np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    assert cos[0, 1] == pytest.approx(1 / math.sqrt(2)) and math.isnan(cos[2, 0])
    bank = MemoryBank(3, 2)
    transfer_and_update(bank, 1, np.array([0.0, 2.0]), 0.3, 1)
    transfer_and_update(bank, 2, np.array([3.0, 0.0]), 0.3, 2)
    state = bank.state()
    t = transfer_against(bank, 0, np.array([1.0, 1.0]), 0.3, 3)
    assert t == pytest.approx(1 / math.sqrt(2))                            # mean of cos 45 deg with both
    np.testing.assert_equal(bank.state(), state)                             # the bank is untouched
    assert math.isnan(transfer_against(None, 0, np.ones(2), 0.3, 3))


def test_entropy_and_noise_free_heldout_columns():
    assert normalised_entropy(np.array([0.5, 0.5])) == pytest.approx(1.0)
    assert normalised_entropy(np.array([0.0, 1.0, 0.0])) == 0.0
    assert normalised_entropy(np.array([0.25, 0.75])) == pytest.approx(
        -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) / math.log(2))
    env = make_env("student", seed=0, **SMALL)
    res = hbsim.run(make("uniform", n_arms=6, seed=0), env, 3, seed=0)
    s = env.success_matrix()
    assert res.train["true_heldout_tasks"].iloc[-1] == pytest.approx(s[40:, :6].mean(), abs=0, rel=1e-15)
    assert res.train["true_heldout_harness"].iloc[-1] == pytest.approx(s[40:, 6].mean(), abs=0, rel=1e-15)
    np.testing.assert_allclose(res.train["entropy"], 1.0, rtol=0, atol=1e-15)      # uniform law


def test_config_key_only_when_set_and_its_validation():
    plain = resolve_config({"env": {"kind": "bernoulli"}})
    assert "counterfactual" not in plain
    assert resolve_config({"env": {"kind": "bernoulli"}, "counterfactual": None}) == plain
    assert config_hash(resolve_config({"env": {"kind": "bernoulli"}, "counterfactual": 2})) != config_hash(plain)
    with pytest.raises(ValueError, match="counterfactual=0 is not allowed"):
        resolve_config({"env": {"kind": "bernoulli"}, "counterfactual": 0})
    with pytest.raises(ValueError, match="counterfactual"):
        Probe(0)


def test_grid_cells_carry_the_counterfactual_key():
    from ablations.spec import parse_spec
    spec = parse_spec({"name": "g", "steps": 3, "seeds": 1, "counterfactual": 2, "env": {"kind": "bernoulli"},
                       "policies": [{"name": "uniform"}]})
    assert spec.cells()[0].config["counterfactual"] == 2
    with pytest.raises(ValueError, match="counterfactual"):
        parse_spec({"name": "g", "steps": 3, "seeds": 1, "counterfactual": 0, "env": {"kind": "bernoulli"},
                    "policies": [{"name": "uniform"}]})


def test_write_and_read_run_with_counterfactual(tmp_path):
    res = run_config(_cfg("bernoulli", "uniform", counterfactual=7))
    write_run(res, tmp_path / "run")
    back = read_run(tmp_path / "run")
    pd.testing.assert_frame_equal(back.counterfactual, res.counterfactual)
    write_run(run_config(_cfg("bernoulli", "uniform")), tmp_path / "run", overwrite=True)
    assert not (tmp_path / "run" / "counterfactual.parquet").exists()      # no stale probe left behind


@pytest.mark.cli
@pytest.mark.slow
def test_cli_sim_counterfactual_then_validity(tmp_path):
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    out = tmp_path / "sim"
    sets = [a for k, v in SMALL.items() for a in ("--set", f"env.{k}={v}")]
    cmd = [sys.executable, "-m", "hbsim.cli", "sim", "--env", "drifting", "--policy", "harnessbandit", "--seeds", "3",
           "--steps", "12", "--jobs", "1", "--counterfactual", "--out", str(out),
           "--set", "policy.warmup_rounds=1", *sets]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert (out / "harnessbandit" / "seed2" / "counterfactual.parquet").is_file()
    done = subprocess.run([sys.executable, "-m", "hbsim.cli", "validity", str(out), "--min-step", "6", "--out",
                           str(tmp_path / "v"), "--resamples", "200"], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "T(gradient)" in done.stdout and "held-out harness" in done.stdout and "drifting" in done.stdout
    assert (tmp_path / "v" / "validity.html").is_file() and (tmp_path / "v" / "validity.csv").is_file()
    bad = subprocess.run([sys.executable, "-m", "hbsim.cli", "validity", str(tmp_path / "nope")],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "nope" in bad.stderr


@pytest.mark.cli
@pytest.mark.slow
def test_cli_validity_study_runs_then_resumes(tmp_path):
    study = tmp_path / "study.toml"
    study.write_text('steps = 8\nseeds = 2\ncounterfactual = 2\nenvs = ["student", "adam-counterexample"]\n'
                     '[env]\nn_tasks = 30\nn_heldout_tasks = 10\n[[policies]]\nname = "harnessbandit"\n'
                     'warmup_rounds = 1\n')
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "hbsim.cli", "validity", str(tmp_path / "runs"), "--study", str(study),
           "--min-step", "0", "--resamples", "100", "--jobs", "1"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "4 of 4 runs to do" in done.stderr and "adam-counterexample" not in done.stdout
    assert "drifting" in done.stdout and "student" in done.stdout and "law entropy" in done.stdout
    cf = read_run(tmp_path / "runs" / "student" / "harnessbandit" / "seed1").counterfactual
    assert sorted(cf["step"].unique()) == [2, 4, 6, 8]
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0 and "0 of 4 runs to do" in again.stderr
    study.write_text('envs = "student"\n[[policies]]\nname = "harnessbandit"\n')
    bad = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 2 and "envs='student' is not allowed" in bad.stderr


@pytest.mark.parametrize("policy", sorted(__import__("policies").POLICIES))
def test_every_policy_is_restored_exactly_by_the_probe(policy):
    cfg = {"env": {"kind": "student", **SMALL}, "policy": {"name": policy}, "seed": 5, "steps": 10}
    plain, probed = run_config(cfg), run_config({**cfg, "counterfactual": 3})
    _same(plain.train, probed.train)
    _same(plain.eval, probed.eval)
