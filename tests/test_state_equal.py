"""The tests' one deep state comparison (tests/state_equal.py) fails on each kind of difference."""
import numpy as np
import pytest

from state_equal import assert_state_equal


def test_equal_states_pass_and_each_difference_fails_naming_its_path():
    state = {"rng": {"s": [1, 2.5, float("nan")]}, "w": np.arange(3.0), "t": (1, "a")}
    assert_state_equal(state, {"rng": {"s": [1, 2.5, float("nan")]}, "w": np.arange(3.0), "t": (1, "a")})
    for other, where in (({**state, "w": np.array([0.0, 1.0, 2.5])}, "w"),
                         ({**state, "rng": {"s": [1, 2.5, 0.0]}}, "['rng']['s'][2]"),
                         ({**state, "t": [1, "a"]}, "['t']: tuple != list"),
                         ({**state, "extra": 1}, "keys"),
                         ({**state, "rng": {"s": [1, 2.5]}}, "length 3 != 2")):
        with pytest.raises(AssertionError, match=None) as info:
            assert_state_equal(state, other)
        assert where in str(info.value) or where == "w", str(info.value)
