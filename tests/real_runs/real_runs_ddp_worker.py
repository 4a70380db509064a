"""Worker of the DDP sketch test (run under `python -m torch.distributed.run`, gloo, CPU).

Every rank builds the same tiny model and the same global batch, keeps rows rank::world,
divides its loss by the GLOBAL token count, back-propagates, and takes the sketch with the
trainer's SUM all-reduce; then the gradients are SUM all-reduced too. Rank 0 saves both.
Also importable: `global_batch()` and `single_process()` give the reference.
"""
import sys

import numpy as np
import torch
import torch.distributed as dist

from real_runs.model import ModelConfig, Transformer
from real_runs.sketch import ParamSketch, all_reduce_grads
from real_runs.trainer import Group, Turn, accumulate_gradients, build_rows, global_sum, take_sketch


def model():
    return Transformer(ModelConfig(n_layer=3, d_model=32, n_head=2, d_mlp=64, max_len=64),
                       torch.Generator().manual_seed(5))


def global_batch():
    rng = np.random.default_rng(9)
    groups = []
    for g in range(3):
        turns = [[Turn(rng.integers(0, 256, 6).tolist(), rng.integers(0, 256, int(n)).tolist(),
                       (-rng.random(int(n)) * 3).tolist())] for n in rng.integers(2, 9, 4)]
        groups.append(Group(g % 2, f"t{g}", rng.integers(0, 2, 4).astype(float), turns, 0))
    return build_rows(groups)


def subset(rows, keep):
    from real_runs.trainer import Rows
    return Rows(*[[getattr(rows, f)[i] for i in keep] for f in ("tokens", "spans", "old_logp", "adv", "traj", "group")])


def sketch_of(m):
    return ParamSketch.build(m, block_path="blocks", last_blocks=2, dim=300, seed=1)


def step(rows, n_tokens):
    m = model()
    accumulate_gradients(m, model().requires_grad_(False), rows, micro_batch=2, n_tokens_global=n_tokens,
                         clip_low=0.2, clip_high=0.2, kl_coef=0.05)
    sketch = take_sketch(sketch_of(m))
    all_reduce_grads(list(m.parameters()))
    return sketch.numpy(), torch.cat([p.grad.reshape(-1) for p in m.parameters()]).numpy()


def single_process():
    rows = global_batch()
    return step(rows, rows.n_tokens)


if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = global_batch()
    local = subset(rows, list(range(rank, len(rows), world)))
    n_tokens = global_sum(local.n_tokens, "cpu")
    sketch, grads = step(local, n_tokens)
    if rank == 0:
        np.savez(sys.argv[1], sketch=sketch, grads=grads, n_tokens=n_tokens)
    dist.destroy_process_group()
