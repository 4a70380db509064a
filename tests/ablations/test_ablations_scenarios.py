"""The shipped scenario suite (hbsim.scenarios, ablations.scenarios, `hb scenarios`): every
scenario's claimed structure from the ground truth, the table1 pattern, the commands (the oracle
beating uniform by >= 3x the paired MDE: tests/hbsim/test_scenario_claims.py, from the runs its
claims read)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

from ablations import scenarios as measure
from hbsim import cli
from hbsim.envs import make_env
from hbsim.experiment import resolve_config
from hbsim.grpo import binary_group_learnability
from hbsim.scenarios import FOLDER, SCENARIOS, scenario_config

ROOT = Path(__file__).resolve().parents[2]


def built(name, seed=0):
    env = dict(SCENARIOS[name].env)
    return make_env(env.pop("kind"), seed=seed, **env)


def idx(e, *names):
    return [e.harnesses.index(n) for n in names]


def pure(e, h, B=8):
    return np.eye(e.H, dtype=np.int64)[h] * B


def cos(d):
    n = np.linalg.norm(d, axis=1, keepdims=True)
    u = np.divide(d, n, out=np.zeros_like(d), where=n > 0)
    return u @ u.T


def train_gain_on(e, h, cols):
    """Expected change of the mean training success on columns `cols` after a pure step on h."""
    after = e.expected_success(pure(e, h)[None])[0]
    return float((after[: e.n_tasks, cols] - e.success_matrix()[: e.n_tasks, cols]).mean())


def expected_l(p, G=8):
    """E[L] of a binary LOO group with success probability p."""
    from scipy.stats import binom
    k = np.arange(G + 1)
    return float(binom.pmf(k, G, p) @ binary_group_learnability(k, G))


def by_role(e, role):
    return [i for i, r in enumerate(e.roles) if r == role]


# -- the claimed structure of each scenario, from the ground truth -----------------------
def claims_table1(e):
    assert e.harnesses == ["primary1", "primary2", "anchor", "trap", "noise", "dead"]
    c = cos(e.true_directions())
    assert all(c[3, j] < 0 for j in (0, 1, 2))
    assert np.all(e.success_matrix()[:, 5] == 0) and np.all(e.success_matrix()[:, 4] == e.knobs["noise_p"])
    # specialising on the primaries hurts the held-out harness; a little skill on many formats helps it
    ho = lambda s: e._success(e.z[None], np.array([s], dtype=float))[0, e.n_tasks:, e.H].mean()     # noqa: E731
    start = ho([0, 0, 0, 0, 0, 0])
    assert ho([3, 3, 0, 0, 0, 0]) < start - 0.05 and ho([0.4, 0.4, 0.4, 0.4, 0, 0]) > start + 0.05


def claims_anchor(e):
    anchor, ords = 0, by_role(e, "ordinary")
    p = e.success_matrix()[: e.n_tasks]
    assert expected_l(p[:, anchor].mean()) < min(expected_l(p[:, h].mean()) for h in ords)      # low L
    assert all(cos(e.true_directions())[anchor, h] > 0 for h in ords)
    others = [h for h in ords if h != ords[0]]
    assert train_gain_on(e, anchor, others) > 2 * train_gain_on(e, ords[0], others)           # high transfer


def claims_trap(e):
    trap = by_role(e, "trap")[0]
    c = cos(e.true_directions())
    assert all(c[trap, h] < 0 for h in by_role(e, "ordinary"))
    assert train_gain_on(e, trap, by_role(e, "ordinary")) < 0
    assert expected_l(e.success_matrix()[: e.n_tasks, trap].mean()) > 0.4                     # high L


def claims_noise(e):
    for h in by_role(e, "noise"):
        assert e.expected_gains(pure(e, h)[None])[0] == pytest.approx(0, abs=1e-12)
        assert np.all(e.success_matrix()[:, h] == e.knobs["noise_p"])
        assert expected_l(e.knobs["noise_p"]) > 0.45


def claims_dead(e):
    for h in by_role(e, "dead"):
        assert np.all(e.success_matrix()[:, h] == 0)
        assert e.train_step(pure(e, h)).cost.groups_retained == 0


def claims_unlock(e):
    locked = by_role(e, "locked")
    assert e.success_matrix()[: e.n_tasks, locked].mean() < 0.01
    s = e.s.copy()
    s[by_role(e, "key")] = 2 * e.knobs["unlock_at"]
    assert e._success(e.z[None], s[None])[0][: e.n_tasks, locked].mean() > 0.2


def claims_churn(e):
    late, gone = by_role(e, "late"), by_role(e, "gone")
    assert e.available(0)[late].sum() == 0 and e.available(0)[gone].all()
    step = e.knobs["arrive_step"]
    assert e.available(step)[late].all() and e.available(e.knobs["leave_step"])[gone].sum() == 0
    assert e.train_step(pure(e, late[0])).cost.groups_retained == 0


def claims_many(e):
    fillers, ords = by_role(e, "filler"), by_role(e, "ordinary")
    assert e.H == 12 and len(fillers) == 9
    gains = e.expected_gains(np.eye(e.H, dtype=np.int64) * 8)
    assert gains[fillers].max() < gains[ords].min()
    assert e.success_matrix()[: e.n_tasks, fillers].mean() > 0.9


def claims_forgetting(e):
    assert e.knobs["forget"] > 0
    for _ in range(5):
        e.train_step(pure(e, 0))
    s0 = e.s[0]
    e.train_step(pure(e, 1))
    assert e.s[0] < 0.9 * s0


def claims_interference(e):
    mixed = np.full((1, e.H), 8 // e.H + 1)
    pures = e.expected_gains(np.eye(e.H, dtype=np.int64) * int(mixed.sum()))
    assert e.expected_gains(mixed)[0] < pures.mean()


def claims_coverage(e):
    ords, plats = by_role(e, "ordinary"), by_role(e, "plateau")
    z = e.z[None]
    spread, focus = np.zeros((1, e.H)), np.zeros((1, e.H))
    spread[0, ords], focus[0, ords[0]] = 1.0, 3.0
    ho = lambda s: e._success(z, s)[0, e.n_tasks:, e.H].mean()     # noqa: E731
    assert ho(spread) > ho(focus) + 0.05
    plat = np.zeros((1, e.H))
    plat[0, plats] = 3.0
    assert ho(plat) == pytest.approx(ho(np.zeros((1, e.H))))      # the plateaus cover nothing


def claims_misaligned(e):
    prim, ords = by_role(e, "primary"), by_role(e, "ordinary")
    gains = e.target_gains(np.eye(e.H, dtype=np.int64) * 8, "heldout_harness")
    assert gains[prim].max() < 0 < gains[ords].min()
    train = e.expected_gains(np.eye(e.H, dtype=np.int64) * 8)
    assert train[prim].min() > 0                                   # the train signal still likes them


def claims_saturation(e):
    plats = by_role(e, "plateau")
    s = e.s.copy()
    s[plats] = 10.0
    e.s, e._p = s, None
    p = e.success_matrix()[: e.n_tasks, plats]
    assert p.max() <= e.knobs["plateau_ceiling"] and p.mean() > 0.95 * e.knobs["plateau_ceiling"]
    assert e.expected_gains(pure(e, plats[0])[None])[0] < 1e-3          # nothing left to gain
    assert expected_l(p.mean()) > 0.4                                      # yet L stays high


def claims_kitchen(e):
    claims_table1_like = cos(e.true_directions())
    trap = by_role(e, "trap")[0]
    assert all(claims_table1_like[trap, h] < 0 for h in by_role(e, "primary") + by_role(e, "anchor"))
    assert e.knobs["forget"] > 0 and e.knobs["interference"] > 0 and e.knobs["coverage"] > 0


#: scenario -> the check of its built world (the `claims_<scenario>` functions above: what the world itself
#: must show), distinct from tests/hbsim/test_scenario_claims.DESIGN_CLAIMS (what each design achieves there)
WORLD_CHECKS = {name[len("claims_"):]: f for name, f in globals().items() if name.startswith("claims_")}


def test_the_suite_ships_at_least_12_scenarios_each_with_its_claims_and_text():
    assert len(SCENARIOS) >= 12 and set(WORLD_CHECKS) == set(SCENARIOS)
    for sc in SCENARIOS.values():
        assert len(sc.summary) > 200 and "hb scenarios" in sc.lr_note, sc.name
        resolve_config(scenario_config(sc.name, {"name": "uniform"}))


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_structure_from_the_ground_truth(name):
    for seed in (0, 1):
        WORLD_CHECKS[name](built(name, seed))


@pytest.mark.calibration
def test_table1_reproduces_the_mixed_pattern():
    truth = measure.final_truth("table1", [{"name": "mixed", "arms": [0, 1], "label": "mixed2"},
                                           {"name": "mixed", "label": "mixed6"}])
    gain = {label: truth[i].mean(axis=0) - truth["start"].mean(axis=0) for i, label in enumerate(["mixed2", "mixed6"])}
    # columns: train, heldout_tasks (in-distribution), heldout_harness
    assert gain["mixed2"][1] > 0.1 and gain["mixed2"][2] < -0.05
    assert abs(gain["mixed6"][1]) < 0.25 * gain["mixed2"][1] and gain["mixed6"][2] > 0.05


def test_hb_scenarios_lists_shows_and_checks(capsys):
    assert cli.main(["scenarios"]) == 0
    out = capsys.readouterr().out
    assert all(f"{name}  (target" in out for name in SCENARIOS)
    assert cli.main(["scenarios", "dead"]) == 0
    out = capsys.readouterr().out
    assert 'roles = "ordinary*2,dead*4"' in out.replace("ordinary,ordinary,dead,dead,dead,dead", "ordinary*2,dead*4")
    assert cli.main(["scenarios", "dead", "--check", "--seeds", "2", "--policy", "mixed:arms=[0,1]"]) == 0
    out = capsys.readouterr().out
    assert "mixed:arms=[0,1]" in out and "x MDE" in out
    assert cli.main(["scenarios", "nope"]) == 2
    assert "valid scenarios: anchor" in capsys.readouterr().err


def test_hb_scenarios_sweep_prints_the_binding_fraction_and_the_late_gain(capsys):
    assert cli.main(["scenarios", "dead", "--sweep", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    sweep = measure.sweep("dead", seeds=2)
    assert "fraction of steps the trust region (max_step) binds" in out
    for f, row in sweep.items():
        assert f"  x{f:<6g} {row['train']:.3f} | bound {row['bound']:.2f} | late {row['late']:.2f}" in out.splitlines()
    assert list(sweep) == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0]


def test_hb_sim_runs_a_scenario(capsys):
    assert cli.main(["sim", "--scenario", "dead", "--policy", "oracle", "--policy", "uniform", "--seeds", "1",
                     "--steps", "5", "--jobs", "1"]) == 0
    assert "visits ordinary1/ordinary2/dead1" in capsys.readouterr().out
    assert cli.main(["sim", "--scenario", "dead", "--env", "student"]) == 2


def test_scenario_files_are_package_data():
    raw = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "scenarios/*.toml" in raw["tool"]["setuptools"]["package-data"]["hbsim"]
    assert sorted(p.stem for p in FOLDER.glob("*.toml")) == sorted(SCENARIOS)


def test_lr_sweep_is_the_designs_lr_scale_and_equals_the_rates_multiplied():
    """One learning-rate story (docs/ARCHITECTURE.md): the sweep multiplies the design's
    lr_scale, which the env applies to its own rates; the same numbers as multiplying the
    scenario's lr and skill_lr (what the scenario files' lr_note measured)."""
    env = SCENARIOS["trap"].env
    sweep = measure.lr_sweep("trap", (0.25, 3.0), seeds=2)
    assert list(sweep) == [0.25, 3.0]
    for f, value in sweep.items():
        by_rates = measure.final_truth("trap", [{"name": "uniform"}], 2, lr=env["lr"] * f,
                                       skill_lr=env["skill_lr"] * f)
        assert value == float(by_rates[0][:, 0].mean())
    assert sweep[0.25] == pytest.approx(0.3173298055127881, abs=1e-12)    # trap as recalibrated in issue 28
    assert sweep[0.25] < sweep[3.0]


def test_sweep_reads_the_trust_region_and_the_late_gain_off_the_runs():
    """`sweep`'s "bound" is the mean of the runs' trust_bound column and "late" the share of
    the gain over the start made in the last quarter, recomputed here from the same runs."""
    row = measure.sweep("dead", (1.0,), seeds=2)[1.0]
    tables, start, harnesses = measure.train_tables("dead", {"name": "uniform", "lr_scale": 1.0}, 2)
    assert row["bound"] == pytest.approx(np.mean([t["trust_bound"].mean() for t in tables]), abs=1e-15)
    truth = np.array([t[[f"true_{h}" for h in harnesses]].mean(axis=1).to_numpy() for t in tables])
    final, at75 = truth[:, -1].mean(), truth[:, 74].mean()         # 100 steps: the state after step 75
    assert row["train"] == pytest.approx(final, abs=1e-15)
    assert row["late"] == pytest.approx((final - at75) / (final - start.mean()), abs=1e-12)
    assert 0 <= row["bound"] < 0.5 and 0 < row["late"] < 0.25
