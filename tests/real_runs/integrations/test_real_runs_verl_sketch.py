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


def test_a_non_fsdp2_placement_is_refused():
    class Fake:
        placements = (Replicate(),)
        shape = torch.Size([3, 2])
    with pytest.raises(ValueError, match=r"placements \(Replicate\(\),\) is not supported"):
        _shard_range(Fake())
