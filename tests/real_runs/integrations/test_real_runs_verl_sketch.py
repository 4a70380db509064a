"""The sketch on FSDP2 shards (verl's actor with actor.strategy=fsdp2): two gloo ranks on the
CPU, uneven shards, the SUM all-reduce assembling the full sketch, equal to the unsharded
sketch of the same gradient (real_runs/integrations/verl_sketch.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Replicate

from real_runs.integrations.verl_sketch import _shard_range
from real_runs_torchrun import torchrun

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_fsdp2_sharded_sketch_equals_the_unsharded_sketch(tmp_path):
    import real_runs_fsdp2_sketch_worker as worker
    out = tmp_path / "rank0.npz"
    proc = torchrun(HERE / "real_runs_fsdp2_sketch_worker.py", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(out)
    # rank 0's shards: 7 -> 4 rows, 9 -> 5 rows, 3 -> 2 rows (uneven: rank 1 holds 3, 4, 1)
    assert got["local_rows"].tolist() == [4, 4, 5, 5, 2, 2]
    ref = worker.single_process()
    assert ref.shape == (worker.DIM,) and np.count_nonzero(ref) > worker.DIM // 2
    np.testing.assert_allclose(got["sketch"], ref, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_the_engine_wrap_takes_the_summed_pre_clip_sketch(tmp_path):
    """verl 0.8-0.9's engine optimizer_step wrapped (verl_engine_sketch): two gloo ranks, two
    optimizer steps of one update; the sketch taken is the sum of the pre-clip sketches, and the
    engine's own clip then scaled the gradients by 0.01 / norm."""
    out = tmp_path / "engine.npz"
    proc = torchrun(HERE / "real_runs_engine_sketch_worker.py", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(out)
    assert got["taken"].shape == (40,) and bool(got["again"])
    np.testing.assert_allclose(got["taken"], got["pre"].sum(axis=0), rtol=1e-6, atol=1e-7)
    assert not np.allclose(got["pre"][0], got["pre"][1])          # the first step moved the weights
    assert (got["norms"] > 0.01).all()
    for pre, post, norm in zip(got["pre"], got["post"], got["norms"]):
        np.testing.assert_allclose(post, pre * (0.01 / norm), rtol=1e-4, atol=1e-9)


def test_a_second_wrap_is_refused():
    from types import SimpleNamespace

    from real_runs.integrations.verl_engine_sketch import attach, wrap_optimizer_step
    calls = []
    engine = SimpleNamespace(optimizer_step=lambda: calls.append("step") or 2.0)
    sketch = SimpleNamespace(grad=lambda: torch.tensor([1.0, 2.0]))
    wrap_optimizer_step(engine, sketch)
    assert engine.optimizer_step() == 2.0 and engine.optimizer_step() == 2.0 and calls == ["step", "step"]
    assert attach({"loss": 1.0}, engine) == {"loss": 1.0, "hb_sketch": [2.0, 4.0]}
    assert attach({}, engine) == {}
    with pytest.raises(ValueError, match="already wrapped"):
        wrap_optimizer_step(engine, sketch)


def test_a_non_fsdp2_placement_is_refused():
    class Fake:
        placements = (Replicate(),)
        shape = torch.Size([3, 2])
    with pytest.raises(ValueError, match=r"placements \(Replicate\(\),\) is not supported"):
        _shard_range(Fake())
