"""The sketch on FSDP2 shards (verl's actor with actor.strategy=fsdp2): two gloo ranks on the
CPU, uneven shards, the SUM all-reduce assembling the full sketch, equal to the unsharded
sketch of the same gradient (real_runs/integrations/verl_sketch.py)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.distributed.tensor import Replicate

from real_runs.integrations.verl_sketch import _shard_range

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_fsdp2_sharded_sketch_equals_the_unsharded_sketch(tmp_path):
    import real_runs_fsdp2_sketch_worker as worker
    out = tmp_path / "rank0.npz"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), str(HERE / "real_runs_fsdp2_sketch_worker.py"), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
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
