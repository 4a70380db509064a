"""The one knob schema (policies.knobs) by hand, and every policy's table against what the
policy reports: defaults, resolved configs, variants, the run config's table."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from policies import POLICIES, make
from policies.base import BATCH_GROUPS
from policies.errors import UserError
from policies.knobs import Knob, Knobs, int_list
from policies.scored import SCORED_KNOBS

TABLE = Knobs({"lr": Knob(0.5, "step size", 0.0, 1.0, low_open=True),
               "rounds": Knob(3, "rounds", 1, 10),
               "mode": Knob("a", "which mode", choices=("a", "b"))}, scope="policy", owner="policy 'toy'")


# -- the table by hand ----------------------------------------------------------------
def test_resolve_fills_defaults_in_table_order_and_coerces():
    assert TABLE.resolve() == {"lr": 0.5, "rounds": 3, "mode": "a"}
    got = TABLE.resolve({"mode": "b", "lr": 1, "rounds": np.int64(7)})
    assert got == {"lr": 1.0, "rounds": 7, "mode": "b"} and list(got) == ["lr", "rounds", "mode"]
    assert type(got["lr"]) is float and type(got["rounds"]) is int


def test_unknown_key_names_the_owner_and_the_valid_knobs():
    with pytest.raises(UserError) as exc:
        TABLE.resolve({"lrr": 0.1})
    assert str(exc.value) == "policy 'toy' has no knob 'lrr'; valid knobs: lr, rounds, mode"
    with pytest.raises(UserError, match=r"^policy 'uniform' has no knob 'tau'; valid knobs: lr_scale$"):
        make("uniform", n_arms=2, tau=0.1)


def test_without_drops_knobs_and_refuses_unknown_ones():
    small = TABLE.without("lr", "mode")
    assert list(small) == ["rounds"] and small.owner == "policy 'toy'" and list(TABLE) == ["lr", "rounds", "mode"]
    with pytest.raises(UserError, match="has no knob 'nope'"):
        TABLE.without("nope")


def test_with_defaults_checks_the_new_default_and_keeps_the_rest():
    other = TABLE.with_defaults(rounds=5)
    assert other.defaults() == {"lr": 0.5, "rounds": 5, "mode": "a"} and TABLE["rounds"].default == 3
    assert other["rounds"].high == 10
    with pytest.raises(UserError, match=r"policy.rounds=11 is not allowed: expected an integer in \[1, 10\]"):
        TABLE.with_defaults(rounds=11)


def test_or_appends_or_replaces_in_place():
    more = TABLE | {"extra": Knob(True, "a flag"), "lr": Knob(0.1, "another lr", 0.0, 2.0)}
    assert list(more) == ["lr", "rounds", "mode", "extra"]
    assert more.defaults() == {"lr": 0.1, "rounds": 3, "mode": "a", "extra": True}


def test_settings_is_a_frozen_slots_record():
    cfg = TABLE.settings({"rounds": 4})
    assert (cfg.lr, cfg.rounds, cfg.mode) == (0.5, 4, "a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.lr = 0.9
    assert not hasattr(cfg, "__dict__")
    assert dataclasses.asdict(cfg) == {"lr": 0.5, "rounds": 4, "mode": "a"}
    # record(): values already checked; a knob missing from them takes its default
    assert dataclasses.asdict(TABLE.record({"mode": "b"})) == {"lr": 0.5, "rounds": 3, "mode": "b"}


# -- one test per kind of knob --------------------------------------------------------
def test_int_knob():
    knob = Knob(3, "n", 1, 10)
    assert knob.check("k", np.int32(10)) == 10
    for bad in (0, 11, 2.0, True, "3"):
        with pytest.raises(UserError, match=r"is not allowed: expected an integer in \[1, 10\]"):
            knob.check("k", bad)


def test_float_knob_open_and_closed_ends():
    knob = Knob(0.5, "x", 0.0, 1.0, low_open=True)
    assert knob.check("x", 1) == 1.0 and knob.check("x", np.float32(0.25)) == 0.25
    with pytest.raises(UserError, match=r"^x=0 is out of range: expected a finite number in \(0.0, 1.0\]$"):
        knob.check("x", 0)
    for bad in (float("nan"), float("inf"), "0.5", False):
        with pytest.raises(UserError, match="is not allowed: expected a finite number"):
            knob.check("x", bad)


def test_bool_knob():
    knob = Knob(False, "flag")
    assert knob.check("f", np.bool_(True)) is True
    with pytest.raises(UserError, match=r"^f=1 is not allowed: expected true or false$"):
        knob.check("f", 1)


def test_choice_knob():
    assert TABLE.check("mode", "b") == "b"
    with pytest.raises(UserError, match=r"^policy.mode='c' is not allowed: expected one of a, b$"):
        TABLE.check("mode", "c")
    with pytest.raises(UserError, match="expected one of"):
        Knob(1, "n", choices=(1, 2)).check("n", True)
    with pytest.raises(UserError, match=r"^d='f16' is not allowed: expected one of '' \(none\), bfloat16$"):
        Knob("", "dtype", choices=("", "bfloat16")).check("d", "f16")


def test_optional_knob():
    knob = Knob(None, "age", 0, 5, type=int, optional=True)
    assert knob.check("a", None) is None and knob.check("a", 5) == 5
    assert knob.allowed() == "an integer in [0, 5] or none"
    with pytest.raises(UserError, match=r"a=6 is not allowed"):
        knob.check("a", 6)


def test_parse_knob_int_list():
    knob = Knob(None, "arms", parse=int_list(0, 3, min_len=1), optional=True)
    assert knob.check("arms", (np.int64(2), 0)) == [2, 0]
    assert knob.allowed() == "a list of distinct integers in [0, 3] with at least 1 item or none"
    for bad in ([], [0, 0], [4], "0,1", [True], [0.5]):
        with pytest.raises(UserError, match=r"^arms=.* is not allowed: expected a list of distinct integers"):
            knob.check("arms", bad)


def test_listing_and_docstring():
    assert TABLE.listing("  ")[0] == "  lr = 0.5: step size (a finite number in (0.0, 1.0])"
    assert TABLE.docstring("Toy.").startswith("Toy.\n\n    Knobs:\n    lr = 0.5: step size")
    scored = POLICIES["harnessbandit"]
    assert "    tau = 0.3: softmax temperature (a finite number in (0.0, 1000000000.0])" in scored.__doc__


# -- every registered policy ----------------------------------------------------------
@pytest.mark.parametrize("name", sorted(POLICIES))
def test_policy_knobs_are_its_table_and_config_round_trips(name):
    cls = POLICIES[name]
    assert cls.knobs() == cls.KNOBS.defaults() and cls.KNOBS.owner == f"policy {name!r}"
    pol = make(name, n_arms=4, seed=7)
    config = pol.config()
    quiet = {"lr_scale": 1.0, **cls.QUIET_DEFAULTS}  # lr_scale = 1 and the knobs beyond the paper: left out
    defaults = {k: v for k, v in cls.knobs().items() if k not in quiet or v != quiet[k]}
    assert config == {"n_arms": 4, "seed": 7, **defaults, **({"arms": [0, 1, 2, 3]} if name == "mixed" else {})}
    assert cls.knobs()["lr_scale"] == 1.0
    again = make(name, **config)
    assert again.config() == config
    again.load_state_dict(pol.state_dict())       # the same knobs: the state fits
    scaled = make(name, n_arms=4, seed=7, lr_scale=1.5)
    assert scaled.config() == {**config, "lr_scale": 1.5} and scaled.lr_scale == 1.5
    with pytest.raises(ValueError, match="lr_scale"):
        scaled.load_state_dict(pol.state_dict())


def test_variants_are_the_family_table_minus_knobs_and_keep_family_defaults():
    learn, transfer = POLICIES["learnability"], POLICIES["transfer"]
    assert list(learn.KNOBS) == [k for k in SCORED_KNOBS
                                 if k not in ("fusion", "alpha", "eta", "transfer_source", "max_memory_age")] + ["lr_scale"]
    assert list(transfer.KNOBS) == [k for k in SCORED_KNOBS if k not in ("fusion", "alpha")] + ["lr_scale"]
    pol = make("learnability", n_arms=3, tau=0.2)
    assert (pol.cfg.fusion, pol.cfg.alpha, pol.cfg.eta, pol.cfg.tau) == ("learnability", 0.5, 0.3, 0.2)
    assert "alpha" not in pol.config() and "fusion" not in pol.config()
    ucb = make("ucb1", n_arms=3, ucb_c=2)
    assert "q_decay" not in ucb.config() and ucb.cfg.q_decay == 0.7 and ucb.cfg.ucb_c == 2.0


def test_fixed_fusion_is_forced_or_refused():
    assert make("transfer", n_arms=3, fusion="transfer").cfg.fusion == "transfer"
    with pytest.raises(UserError, match=r"^policy.fusion='mean' is not allowed for policy 'product': it is fixed to "
                                        r"'product'; use 'harnessbandit' with fusion=\.\.\. instead$"):
        make("product", n_arms=3, fusion="mean")


def test_mixed_arms_bounded_by_n_arms():
    assert make("mixed", n_arms=4, arms=[3, 1]).config()["arms"] == [3, 1]
    with pytest.raises(UserError, match=r"^policy.arms=\[0, 4\] is not allowed: expected a list of distinct integers "
                                        r"in \[0, 3\] with at least 1 item$"):
        make("mixed", n_arms=4, arms=[0, 4])


def test_batch_groups_has_one_default():
    from hbsim.experiment import resolve_run
    from hbsim.run_knobs import RUN_KNOBS
    assert RUN_KNOBS["batch_groups"] is BATCH_GROUPS and BATCH_GROUPS.default == 8
    assert make("uniform", n_arms=2).select().counts.sum() == 8 and make("mixed", n_arms=3).select().counts.sum() == 8
    with pytest.raises(UserError, match=r"^batch_groups=0 is not allowed: expected an integer in \[1, 100000\]$"):
        make("mixed", n_arms=3).select(0)
    assert resolve_run({}) == {"seed": 0, "steps": 150, "eval_every": None, "batch_groups": 8}
    assert resolve_run({"counterfactual": 2, "seed": 4})["counterfactual"] == 2
    with pytest.raises(UserError, match="the run config has no knob 'seeds'"):
        resolve_run({"seeds": 3})          # a count of many runs, not a key of one run's config
