"""hbsim.sampling.DynamicSampler (SPEC §2.2), the one dynamic sampler of sim and real runs:
hand-computed rounds, leftovers oldest first with their ages, expiry, cap, list and array
blocks, exact state round-trip."""
import math

import numpy as np
import pytest

from hbsim.sampling import DynamicSampler

G = 4
MIXED, FLAT = [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]


class Script:
    """generate() that hands out groups from a fixed reward script per harness; a group is
    the tuple (harness, serial number), so the test can follow every group."""

    def __init__(self, scripts):
        self.scripts = {h: list(s) for h, s in scripts.items()}
        self.serial = {h: 0 for h in scripts}
        self.calls = []

    def __call__(self, requests):
        self.calls.append(dict(requests))
        out = {}
        for h, m in requests.items():
            rows = [self.scripts[h].pop(0) for _ in range(m)]
            groups = [(h, self.serial[h] + i) for i in range(m)]
            self.serial[h] += m
            out[h] = (groups, np.array(rows))
        return out


def test_rounds_filter_zero_variance_and_buffer_the_rest():
    s = DynamicSampler(2, oversample=1.5, max_rounds=3)
    gen = Script({0: [MIXED, FLAT, MIXED, MIXED, FLAT, MIXED], 1: [FLAT] * 9})
    out = s.collect({0: 2, 1: 2}, step=0, generate=gen)
    # round 1: ceil(2 * 1.5) = 3 each; h0 keeps groups 0 and 2; h1 none.
    # round 2: h1 still misses 2 -> 3 more (none kept); round 3: 3 more (none kept)
    assert gen.calls == [{0: 3, 1: 3}, {1: 3}, {1: 3}]
    assert out.parts[0] == [[(0, 0), (0, 2)]] and out.parts[1] == []
    assert (out.generated, out.retained, out.leftover_used) == (12, 2, 0)
    assert math.isnan(out.leftover_age) and out.leftover_size == 0


def test_leftovers_first_oldest_first_with_ages_then_fresh():
    s = DynamicSampler(1, oversample=2.0, max_rounds=2)
    gen = Script({0: [MIXED] * 4 + [MIXED] * 2 + [MIXED] * 4})
    first = s.collect({0: 1}, step=0, generate=gen)          # 2 generated, 1 used, 1 buffered
    assert first.parts[0] == [[(0, 0)]] and first.leftover_size == 1
    second = s.collect({0: 1}, step=1, generate=gen)         # the leftover (age 1), nothing generated
    assert second.parts[0] == [[(0, 1)]] and second.generated == 0
    assert second.leftover_used == 1 and second.leftover_age == 1.0 and second.leftover_size == 0
    s.collect({0: 1}, step=2, generate=gen)                  # 2 generated (serial 2, 3): 3 buffered
    s.collect({0: 1}, step=3, generate=gen)                  # leftover 3 (age 1)
    third = s.collect({0: 3}, step=5, generate=gen)          # empty buffer: 6 generated, 3 used, 3 left
    assert third.parts[0] == [[(0, 4), (0, 5), (0, 6)]] and third.leftover_size == 3
    fourth = s.collect({0: 2}, step=8, generate=gen)
    assert fourth.parts[0] == [[(0, 7), (0, 8)]] and fourth.leftover_age == 3.0


def test_max_age_zero_keeps_forever_and_k_drops_older_groups():
    for max_age, expect in ((0, 1), (2, 1), (1, 0)):
        s = DynamicSampler(1, oversample=2.0, max_rounds=1, max_age=max_age)
        gen = Script({0: [MIXED] * 4})
        s.collect({0: 1}, step=0, generate=gen)
        out = s.collect({0: 1}, step=2, generate=gen)        # the leftover is 2 steps old
        assert out.leftover_used == expect, max_age


def test_cap_keeps_the_newest_groups():
    s = DynamicSampler(1, oversample=4.0, max_rounds=1, max_size=3)
    gen = Script({0: [MIXED] * 8})
    out = s.collect({0: 1}, step=0, generate=gen)            # 4 generated, 3 buffered (cap 3)
    assert out.leftover_size == 3
    out = s.collect({0: 1}, step=1, generate=gen)            # 4 fresh + 3 buffered, cap -> newest 3
    assert out.parts[0] == [[(0, 1)]] and out.leftover_size == 2
    s.buffers[0].append([1, [(0, 90), (0, 91)]])
    s._cap()
    assert [g for _, b in s.buffers[0] for g in b] == [(0, 3), (0, 90), (0, 91)]


def test_array_blocks_and_state_round_trip():
    s = DynamicSampler(2, oversample=3.0, max_rounds=1)

    def gen(requests):
        out = {}
        for h, m in requests.items():
            rewards = np.tile(np.array(MIXED), (m, 1))
            rewards[0] = 1.0                                  # the first group of each call is flat
            out[h] = (np.arange(m, dtype=float)[:, None] + 10 * h, rewards)
        return out

    out = s.collect({0: 1, 1: 2}, step=0, generate=gen)
    np.testing.assert_array_equal(out.parts[1][0][:, 0], [11.0, 12.0])
    assert out.leftover_size == (3 - 1 - 1) + (6 - 1 - 2)
    state = s.state_dict()
    twin = DynamicSampler(2, oversample=3.0, max_rounds=1)
    twin.load_state_dict(state)
    a, b = s.collect({1: 4}, step=1, generate=gen), twin.collect({1: 4}, step=1, generate=gen)
    for x, y in zip(a.parts[1], b.parts[1]):
        np.testing.assert_array_equal(x, y)
    with pytest.raises(ValueError, match="buffers"):
        DynamicSampler(3, oversample=1.0, max_rounds=1).load_state_dict(state)


# -- the group filter (keep_band, min_abs_adv) --------------------------------------------
from hbsim.sampling import FILTER_KNOBS, GroupFilter, when_set  # noqa: E402
from policies.errors import UserError  # noqa: E402
from policies.knobs import Knobs  # noqa: E402

#: binary groups of G = 4 with 0..4 successes: means 0, .25, .5, .75, 1
BINARY = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=float)


def test_band_edges_are_inclusive_and_zero_variance_is_always_dropped():
    assert GroupFilter().mask(BINARY).tolist() == [False, True, True, True, False]
    assert GroupFilter("0.25,0.75").mask(BINARY).tolist() == [False, True, True, True, False]    # edges kept
    assert GroupFilter("0.3,0.75").mask(BINARY).tolist() == [False, False, True, True, False]
    assert GroupFilter("0.5,0.5").mask(BINARY).tolist() == [False, False, True, False, False]
    assert GroupFilter("0.0,1.0").mask(BINARY).tolist() == [False, True, True, True, False]     # variance rule
    assert GroupFilter("0.8,1.0").mask(BINARY).tolist() == [False] * 5


def test_abs_advantage_threshold_on_the_group_mean_hand_computed():
    # LOO: A_i = G/(G-1) (r_i - mean); mean |A|: k=1 -> 4/3 * 2 * 0.75 / 4 = 0.5, k=2 -> 4/3 * 0.5 = 2/3
    r = BINARY[1:4]
    assert GroupFilter(min_abs_adv=0.49).mask(r).tolist() == [True, True, True]
    assert GroupFilter(min_abs_adv=0.5).mask(r).tolist() == [False, True, False]   # |A| <= threshold dropped
    assert GroupFilter(min_abs_adv=2 / 3).mask(r).tolist() == [False, False, False]
    # the "mean" kind: r - mean, mean |A| = 0.375 (k = 1, 3) and 0.5 (k = 2)
    assert GroupFilter(min_abs_adv=0.4, advantage="mean").mask(r).tolist() == [False, True, False]
    both = GroupFilter("0.5,1.0", 0.49)
    assert both.mask(BINARY).tolist() == [False, False, True, True, False]


def test_filter_knobs_parse_and_refuse_bad_values():
    table = Knobs(FILTER_KNOBS, scope="env")
    assert table.resolve({"keep_band": [0.2, 0.8]})["keep_band"] == "0.2,0.8"
    assert table.resolve({"keep_band": " 0.25 , 1 "})["keep_band"] == "0.25,1.0"
    assert table.resolve({})["keep_band"] == "" and table.resolve({"keep_band": ""})["keep_band"] == ""
    for bad in ([0.8, 0.2], [0.1], "a,b", [0.1, float("nan")], 0.5, [True, 1.0], "0.1,0.2,0.3"):
        with pytest.raises(UserError, match=r"^env\.keep_band=.* is not allowed: expected a band \"lo,hi\""):
            table.resolve({"keep_band": bad})
    with pytest.raises(UserError, match=r"^env\.min_abs_adv=-0\.1 is out of range"):
        table.resolve({"min_abs_adv": -0.1})
    assert when_set({"a": 1, "keep_band": "", "min_abs_adv": 0.0}) == {"a": 1}
    assert when_set({"keep_band": "0.1,0.2", "min_abs_adv": 0.5}) == {"keep_band": "0.1,0.2", "min_abs_adv": 0.5}


def test_sampler_with_band_refills_and_counts_all_generated_rewards():
    quarter, half = [1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]
    s = DynamicSampler(1, oversample=1.0, max_rounds=3, group_filter=GroupFilter("0.5,0.5"))
    gen = Script({0: [quarter, half, FLAT, half, half]})
    out = s.collect({0: 3}, step=0, generate=gen)
    # round 1: 3 groups, only the half-solved one passes; round 2: 2 more, both pass
    assert gen.calls == [{0: 3}, {0: 2}]
    assert out.parts[0] == [[(0, 1)], [(0, 3), (0, 4)]]
    assert (out.generated, out.retained) == (5, 3)
    assert out.generated_rewards == {0: [20, 1.0 + 2.0 + 4.0 + 2.0 + 2.0]}
    np.testing.assert_array_equal(out.generated_array(2), [[20, 11.0], [0, 0]])
    default = DynamicSampler(1, oversample=1.0, max_rounds=1).collect({0: 3}, 0, Script({0: [quarter, half, FLAT]}))
    assert default.parts[0] == [[(0, 0), (0, 1)]] and default.generated_rewards == {0: [12, 7.0]}
