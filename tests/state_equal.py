"""The one deep comparison of two saved states in the tests (a policy's, an adapter's, a
TRL scheduler's): every tensor, array and value of two nested structures equal, bit for bit.
torch is not imported here (a tensor is recognised by its type's module), so unit tests may
use it."""
from __future__ import annotations

import math

import numpy as np


def assert_state_equal(a, b, where: str = "state") -> None:
    """AssertionError naming the first path where `a` and `b` differ: another type (ints and
    floats compare as numbers), other keys or lengths, another tensor dtype or value, another
    array, another value (NaN equals NaN)."""
    assert type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float))), \
        f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, dict):
        assert a.keys() == b.keys(), f"{where}: keys {sorted(map(str, a))} != {sorted(map(str, b))}"
        for k in a:
            assert_state_equal(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            assert_state_equal(x, y, f"{where}[{i}]")
    elif type(a).__module__ == "torch" and type(a).__name__ == "Tensor":
        import torch
        assert a.dtype == b.dtype and torch.equal(a, b), f"{where}: tensors differ"
    elif isinstance(a, np.ndarray):
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), f"{where}: nan != {b!r}"
    elif hasattr(a, "__dict__") and not isinstance(a, type):
        assert_state_equal(vars(a), vars(b), where)
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"
