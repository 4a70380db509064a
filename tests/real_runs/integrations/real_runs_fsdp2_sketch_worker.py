"""torchrun worker of tests/real_runs/integrations/test_real_runs_verl_sketch.py: the FSDP2-sharded
sketch (real_runs.integrations.verl_sketch.ShardedSketch) of a small model whose blocks have
odd row counts (uneven shards); rank 0 writes the sketch to argv[1]. `single_process()` is the
unsharded reference (ParamSketch on the same model and batch, on the CPU). HB_SKETCH_DEVICE=cuda:
NCCL and one GPU per rank (scripts/gpu_check.sh phase 6); default gloo on the CPU."""
from __future__ import annotations

import os
import sys

import numpy as np
import torch
from torch import nn

from real_runs.native.sketch import ParamSketch

DIM, SEED = 40, 5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([nn.Linear(5, 7), nn.Linear(7, 9), nn.Linear(9, 3)])

    def forward(self, x):
        for b in self.blocks:
            x = torch.tanh(b(x))
        return x


def batch() -> torch.Tensor:
    return torch.linspace(-1, 1, 4 * 5).reshape(4, 5)


def single_process() -> np.ndarray:
    net = Net()
    (net(batch()) ** 2).sum().backward()
    return ParamSketch.build(net, block_path="blocks", last_blocks=2, dim=DIM, seed=SEED).grad().numpy()


def main(out: str) -> None:
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from real_runs.integrations.verl_sketch import ShardedSketch
    torch.set_num_threads(1)
    cuda = os.environ.get("HB_SKETCH_DEVICE", "cpu") == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = False
    net = Net().to(device)
    for block in net.blocks:
        fully_shard(block)
    fully_shard(net)
    (net(batch().to(device)) ** 2).sum().backward()     # the same batch on every rank: FSDP2's averaged gradient = the full one
    sketch = ShardedSketch.build(net, block_path="blocks", last_blocks=2, dim=DIM, seed=SEED).grad()
    local = [tuple(p.to_local().shape) for p in net.parameters()]
    if dist.get_rank() == 0:
        np.savez(out, sketch=sketch.cpu().numpy(), local_rows=np.array([s[0] for s in local]))
    dist.barrier()          # no rank leaves (closing gloo's connections) while another still works
    dist.destroy_process_group()


def exit_now() -> None:
    """Leave without the interpreter's teardown: after destroy_process_group, a rank that has
    used FSDP2 on gloo sometimes aborts in a C++ destructor at exit ("terminate called without
    an active exception", SIGABRT; about 1 run in 7 on torch 2.13 CPU) after its work is written."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--compare"]:      # gpu_check: the saved sketch against the CPU reference
        got = np.load(sys.argv[2])["sketch"]
        print(f"fsdp2 sketch max |diff| vs unsharded CPU: {float(np.abs(got - single_process()).max()):.3g}")
    else:
        main(sys.argv[1])
        exit_now()
