"""torchrun worker of the engine-wrap check (real_runs.integrations.verl_engine_sketch): verl
0.8-0.9's engine `optimizer_step` (verl's own `FSDPEngine.optimizer_step` when verl is
importable, else the same three lines: FSDP2 clip_grad_norm_, step) wrapped so the sketch is
read before the clip; two optimizer steps of one update are summed. Rank 0 writes argv[1]:
the taken sketch, the pre-clip sketches of both steps, the post-clip one, the grad norm.
HB_SKETCH_DEVICE=cuda: NCCL, one GPU per rank (scripts/gpu_check.sh phase 9); default gloo on
the CPU."""
from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import numpy as np
import torch

from real_runs_fsdp2_sketch_worker import DIM, SEED, Net, batch, exit_now

CLIP = 0.01


class Engine:
    """The attributes verl's FSDPEngine.optimizer_step reads: module, optimizer, optimizer_config."""

    def __init__(self, module, optimizer):
        self.module, self.optimizer = module, optimizer
        self.optimizer_config = SimpleNamespace(clip_grad=CLIP)
        self.scaler = None

    def optimizer_step(self):
        try:
            from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
        except ImportError:
            grad_norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), max_norm=CLIP)
            self.optimizer.step()
            return grad_norm.full_tensor().item() if hasattr(grad_norm, "full_tensor") else float(grad_norm)
        return float(FSDPEngine.optimizer_step(self))


def main(out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from real_runs.integrations.verl_engine_sketch import take_step_sketch, wrap_optimizer_step
    from real_runs.integrations.verl_sketch import ShardedSketch
    torch.set_num_threads(1)
    cuda = os.environ.get("HB_SKETCH_DEVICE", "cpu") == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    net = Net().to(device)
    for block in net.blocks:
        fully_shard(block)
    fully_shard(net)
    sketch = ShardedSketch.build(net, block_path="blocks", last_blocks=2, dim=DIM, seed=SEED)
    engine = Engine(net, torch.optim.SGD(net.parameters(), lr=0.1))
    wrap_optimizer_step(engine, sketch)
    pre, post, norms = [], [], []
    for _ in range(2):                                  # one update, two optimizer steps (mini-batches)
        net.zero_grad()
        (net(batch().to(device)) ** 2).sum().backward()
        pre.append(sketch.grad().cpu().numpy())
        norms.append(engine.optimizer_step())
        post.append(sketch.grad().cpu().numpy())        # the clipped gradients are still there after the step
    taken = take_step_sketch(engine)
    if dist.get_rank() == 0:
        np.savez(out, taken=np.asarray(taken), pre=np.stack(pre), post=np.stack(post), norms=np.asarray(norms),
                 again=np.asarray(take_step_sketch(engine) is None))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:        # gpu_check: the summary line
        got = np.load(sys.argv[2])
        ratio = CLIP / got["norms"]
        err = float(np.abs(got["taken"] - got["pre"].sum(axis=0)).max())
        clip = float(np.abs(got["post"] - got["pre"] * ratio[:, None]).max())
        print(f"engine sketch: taken vs summed pre-clip max |diff| {err:.3g}; post-clip vs scaled {clip:.3g}; "
              f"grad norms {got['norms'].round(4).tolist()}")
    else:
        main(sys.argv[1])
        exit_now()
