"""The gradient sketch on torch parameters (SPEC §2.4).

`policies.sketch.plan_sketch` (numpy) fixes, once per run, which flat coordinates of
which named tensors make up the d-dimensional sketch. `ParamSketch` maps that plan onto
a model's parameters: it keeps one int64 index tensor per parameter on the parameter's
device, and a gather is one `index_select` per tensor plus one `cat` -- never a Python
loop over coordinates. Under `torch.distributed` the raw values are all-reduced (SUM)
across ranks before anything is normalised; callers normalise afterwards if at all.
"""
from __future__ import annotations

import fnmatch

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from policies.sketch import plan_sketch
from policies.errors import UserError


def block_parameters(model: nn.Module, block_path: str, last_blocks: int,
                     patterns: tuple[str, ...] = ("*",)) -> list[tuple[str, nn.Parameter]]:
    """Trainable parameters of the last `last_blocks` blocks under `block_path`, in module order.

    block_path: dotted path of the ModuleList of transformer blocks (e.g. "blocks",
    "model.layers"); patterns: fnmatch patterns on the name relative to the block
    (e.g. "attn.*", "mlp.*.weight"). Embeddings and the output head are never included.
    """
    blocks = model.get_submodule(block_path)
    n = len(blocks)
    if not 1 <= last_blocks <= n:
        raise UserError(f"sketch_blocks={last_blocks!r} is not allowed: expected an integer in [1, {n}]")
    chosen = []
    for i in range(n - last_blocks, n):
        for rel, p in blocks[i].named_parameters():
            if p.requires_grad and any(fnmatch.fnmatchcase(rel, pat) for pat in patterns):
                chosen.append((f"{block_path}.{i}.{rel}", p))
    if not chosen:
        raise UserError(f"sketch_patterns={list(patterns)!r} match no parameter of {block_path}")
    return chosen


#: SPEC §2.4: the sketch reads the last 4 transformer blocks unless told otherwise
DEFAULT_LAST_BLOCKS = 4


class ParamSketch:
    """Fixed-coordinate sketch of a list of named parameters.

    named: [(name, parameter)]; plan: name -> sorted int64 flat coordinates (the planner's
    output). `dim` is the sketch length (= d, or every coordinate if the set is smaller).
    The sketch is the concatenation over tensors in sorted-name order, as the planner defines.
    """

    def __init__(self, named: list[tuple[str, torch.Tensor]], plan: dict[str, np.ndarray]):
        named = sorted(named, key=lambda item: item[0])
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.index = []
        for name, p in named:
            idx = np.asarray(plan.get(name, np.zeros(0, dtype=np.int64)), dtype=np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= p.numel()):
                raise ValueError(f"sketch plan for {name} has coordinates outside [0, {p.numel()})")
            self.index.append(torch.as_tensor(idx, device=p.device))
        self.dim = int(sum(i.numel() for i in self.index))

    @classmethod
    def build(cls, model: nn.Module, *, block_path: str, last_blocks: int | None, dim: int, seed: int,
              patterns: tuple[str, ...] = ("*",)) -> "ParamSketch":
        """The sketch of the last `last_blocks` blocks under `block_path` (None: SPEC §2.4's
        default, the last DEFAULT_LAST_BLOCKS, or every block of a shallower model)."""
        if last_blocks is None:
            last_blocks = min(DEFAULT_LAST_BLOCKS, len(model.get_submodule(block_path)))
        named = block_parameters(model, block_path, last_blocks, patterns)
        plan = plan_sketch({name: tuple(p.shape) for name, p in named}, dim, seed)
        return cls(named, plan)

    def _gather(self, tensors: list[torch.Tensor | None]) -> torch.Tensor:
        parts = []
        for t, p, idx in zip(tensors, self.params, self.index):
            if t is None:  # a parameter without gradient contributes zeros
                parts.append(idx.new_zeros(idx.shape, dtype=torch.float32))
            else:
                parts.append(t.detach().reshape(-1).index_select(0, idx).float())
        return torch.cat(parts)  # (dim,)

    def grad(self) -> torch.Tensor:
        """(dim,) float32 sketch of the current `.grad` fields (local rank only)."""
        return self._gather([p.grad for p in self.params])

    def values(self) -> torch.Tensor:
        """(dim,) float32 copy of the parameters at the sketch coordinates."""
        return self._gather(list(self.params))


def all_reduce_sum(x: torch.Tensor) -> torch.Tensor:
    """SUM over ranks in place when torch.distributed is initialised; identity otherwise."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def global_sketch(local: torch.Tensor, grads_synced: bool) -> torch.Tensor:
    """The raw sketch of the global gradient from this rank's sketch (SPEC §2.4): gradients
    already averaged by DDP are global, so their sketch is used as is (summing again would
    count it once per rank); local gradients are SUMmed over ranks before normalising."""
    return local if grads_synced else all_reduce_sum(local)


def all_reduce_grads(params: list[torch.Tensor]) -> None:
    """SUM the gradients over ranks in one flat bucket (each rank's loss is already divided
    by the GLOBAL token count, so the sum is the global-batch gradient)."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    offset = 0
    for p, g in zip(params, grads):
        n = g.numel()
        p.grad = flat[offset:offset + n].view_as(p).clone()
        offset += n
