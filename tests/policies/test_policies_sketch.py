import numpy as np
import pytest

from policies.sketch import largest_remainder_quotas, plan_sketch


def test_largest_remainder_hand_case():
    # sizes 100, 3, 49 (total 152), d = 50: exact 32.89, 0.99, 16.12 -> floors 32, 0, 16 (48)
    # remainders .89 (100*50 mod 152 = 136), .99 (150), .12 (18) -> +1 to index 1 then 0
    np.testing.assert_array_equal(largest_remainder_quotas(np.array([100, 3, 49]), 50), [33, 1, 16])


def test_quotas_sum_to_d_and_are_proportional():
    rng = np.random.default_rng(0)
    for _ in range(50):
        sizes = rng.integers(1, 10_000, size=rng.integers(1, 12))
        d = int(rng.integers(1, sizes.sum()))
        q = largest_remainder_quotas(sizes, d)
        assert q.sum() == d and (q <= sizes).all()
        assert np.all(np.abs(q - sizes * d / sizes.sum()) < 1.0)


def test_plan_is_uniform_without_replacement_fixed_by_seed_and_order_free():
    shapes = {"b.w": (64, 32), "a.w": (128,), "c.w": (16, 16, 4)}
    plan = plan_sketch(shapes, d=300, seed=3)
    assert list(plan) == ["a.w", "b.w", "c.w"] and sum(len(c) for c in plan.values()) == 300
    for name, coords in plan.items():
        n = int(np.prod(shapes[name]))
        assert len(np.unique(coords)) == len(coords) and coords.min() >= 0 and coords.max() < n
        assert (np.diff(coords) > 0).all()
    again = plan_sketch(dict(reversed(list(shapes.items()))), d=300, seed=3)
    for k in plan:
        np.testing.assert_array_equal(plan[k], again[k])
    other = plan_sketch(shapes, d=300, seed=4)
    assert any(not np.array_equal(plan[k], other[k]) for k in plan)


def test_plan_takes_everything_when_small():
    plan = plan_sketch({"x": (3, 4), "y": (5,)}, d=65536, seed=0)
    np.testing.assert_array_equal(plan["x"], np.arange(12))
    np.testing.assert_array_equal(plan["y"], np.arange(5))


def test_coordinates_are_uniform_within_a_tensor():
    counts = np.zeros(100)
    for seed in range(400):
        counts[plan_sketch({"w": (100,)}, d=10, seed=seed)["w"]] += 1
    assert counts.sum() == 4000 and counts.min() > 15 and counts.max() < 70  # mean 40



def test_bad_plan_arguments():
    with pytest.raises(ValueError, match="d=0"):
        plan_sketch({"w": (3,)}, d=0)
    with pytest.raises(ValueError, match="shapes"):
        plan_sketch({}, d=4)
