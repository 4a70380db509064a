"""Worker of the DDP sketch test (run under `python -m torch.distributed.run`, gloo, CPU).

Every rank builds the same tiny model and the same global batch, keeps rows rank::world,
divides its loss by the GLOBAL token count, back-propagates, and ends the step with the
production code of every real step, `trainer.sketch_and_update` (sketch before clipping,
SUM all-reduce of the sketch and of the gradients, clip, optimizer step, update sketch).
Rank 0 saves the sketch, the update sketch, the gradient norm and the parameters after
the step. Also importable: `global_batch()` and `single_process()` give the reference.
SGD keeps the step linear in the gradient, so float rounding stays at rounding size.
"""
import sys

import numpy as np
import torch
import torch.distributed as dist

from real_runs.native.model import ModelConfig, Transformer
from real_runs.native.sketch import ParamSketch
from real_runs.native.trainer import Group, Turn, accumulate_gradients, build_rows, global_sum, sketch_and_update


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
    from real_runs.native.trainer import Rows
    return Rows(*[[getattr(rows, f)[i] for i in keep] for f in ("tokens", "spans", "old_logp", "adv", "traj", "group")])


def sketch_of(m):
    return ParamSketch.build(m, block_path="blocks", last_blocks=2, dim=300, seed=1)


def step(rows, n_tokens):
    m = model()
    accumulate_gradients(m, model().requires_grad_(False), rows, micro_batch=2, n_tokens_global=n_tokens,
                         clip_low=0.2, clip_high=0.2, kl_coef=0.05)
    opt = torch.optim.SGD(m.parameters(), lr=5.0)
    sketch, update, norm, _, _ = sketch_and_update(m, opt, sketch_of(m), update_sketch=True, max_grad_norm=0.005)
    params = torch.cat([p.detach().reshape(-1) for p in m.parameters()]).numpy()
    return {"sketch": sketch, "update": update, "grad_norm": np.float64(norm), "params": params}


def single_process():
    rows = global_batch()
    return step(rows, rows.n_tokens)


if __name__ == "__main__":
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = global_batch()
    local = subset(rows, list(range(rank, len(rows), world)))
    n_tokens = global_sum(local.n_tokens, "cpu")
    got = step(local, n_tokens)
    if rank == 0:
        np.savez(sys.argv[1], n_tokens=n_tokens, **got)
    dist.destroy_process_group()
