"""The gradient sketch on FSDP2-sharded parameters (verl's actor with `actor.strategy=fsdp2`;
docs/VERL.md section 4). torch only, no verl import.

FSDP2 keeps each parameter (and its `.grad`) as a DTensor sharded on dim 0 over the
data-parallel ranks. The plan (`policies.sketch.plan_sketch`, SPEC §2.4) is made on the FULL
shapes, so every rank holds the same plan; `ShardedSketch.grad()` has each rank read the
planned coordinates that fall in its own shard (offset arithmetic on the flat index, one
`index_select`), zeros elsewhere, and the SUM all-reduce over the ranks assembles the full
d-vector on every rank: here the sum is the assembly (each coordinate lives on one rank), not
an average. A plain (replicated) tensor contributes on rank 0 only, so the sum counts it once.
Placements other than one `Shard(0)` (HSDP's 2-D mesh, tensor parallel) are refused.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from real_runs.native.sketch import ParamSketch, all_reduce_sum


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _shard_range(t) -> tuple[int, int]:
    """[start, end) of the flat FULL-tensor coordinates held by this rank's shard of DTensor t."""
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    if len(t.placements) != 1 or not (isinstance(t.placements[0], Shard) and t.placements[0].dim == 0):
        raise ValueError(f"sketch of a DTensor with placements {t.placements} is not supported: expected FSDP2's "
                         "(Shard(dim=0),) on a 1-D mesh")
    shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
    row = int(np.prod(tuple(t.shape[1:]), dtype=np.int64))
    start = int(offset[0]) * row
    return start, start + int(np.prod(tuple(shape), dtype=np.int64))


class ShardedSketch(ParamSketch):
    """`ParamSketch` over FSDP2 parameters: `grad()` / `values()` are the full (dim,) float32
    sketch on every rank (a collective: every rank calls it at the same point, e.g. before
    the optimizer step's clipping)."""

    def _gather(self, tensors: list[torch.Tensor | None]) -> torch.Tensor:
        from torch.distributed.tensor import DTensor
        parts = []
        for t, idx in zip(tensors, self.index):
            part = torch.zeros(idx.shape, dtype=torch.float32, device=idx.device)
            if isinstance(t, DTensor):
                start, end = _shard_range(t)
                mine = (idx >= start) & (idx < end)
                local = t.to_local().detach().reshape(-1)
                part[mine] = local.index_select(0, idx[mine] - start).float()
            elif t is not None and _rank() == 0:
                part = t.detach().reshape(-1).index_select(0, idx).float()
            parts.append(part)
        return all_reduce_sum(torch.cat(parts))      # (dim,): the assembly over the shards
