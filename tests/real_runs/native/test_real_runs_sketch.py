"""The torch gradient sketch: plan mapping, block selection, DDP equality, speed."""
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from policies.sketch import plan_sketch
from real_runs.native.model import ModelConfig, Transformer
from real_runs.native.sketch import ParamSketch, block_parameters
from real_runs_torchrun import torchrun

HERE = Path(__file__).parent


def test_block_parameters_are_the_last_blocks_without_embeddings_or_head():
    m = Transformer(ModelConfig(n_layer=6, d_model=16, n_head=2, d_mlp=32, max_len=8))
    names = [n for n, _ in block_parameters(m, "blocks", 4)]
    assert names[0] == "blocks.2.norm1.weight" and names[-1] == "blocks.5.mlp.down.weight"
    assert len(names) == 4 * 9
    assert not any(("emb" in n) or ("lm_head" in n) for n in names)
    only_mlp = [n for n, _ in block_parameters(m, "blocks", 1, ("mlp.*",))]
    assert only_mlp == ["blocks.5.mlp.up.weight", "blocks.5.mlp.gate.weight", "blocks.5.mlp.down.weight"]
    with pytest.raises(ValueError, match="sketch_blocks=7"):
        block_parameters(m, "blocks", 7)
    with pytest.raises(ValueError, match="match no parameter"):
        block_parameters(m, "blocks", 2, ("nothing*",))


def test_gather_follows_the_plan_in_sorted_name_order():
    a, b = nn.Parameter(torch.arange(12.0).view(3, 4)), nn.Parameter(torch.arange(100.0, 105.0))
    a.grad, b.grad = -a.detach().clone(), b.detach() * 2
    plan = plan_sketch({"z.a": (3, 4), "b": (5,)}, 10, 0)
    assert sum(len(v) for v in plan.values()) == 10
    sk = ParamSketch([("z.a", a), ("b", b)], plan)  # given in module order, gathered by name
    expected = np.concatenate([(b.detach() * 2).numpy()[plan["b"]], -np.arange(12.0)[plan["z.a"]]])
    assert sk.dim == 10 and np.array_equal(sk.grad().numpy(), expected.astype(np.float32))
    assert np.array_equal(sk.values().numpy()[:len(plan["b"])], b.detach().numpy()[plan["b"]])
    b.grad = None  # a tensor without gradient contributes zeros
    assert np.all(sk.grad().numpy()[:len(plan["b"])] == 0)


def test_small_set_takes_every_coordinate():
    m = Transformer(ModelConfig(n_layer=1, d_model=8, n_head=2, d_mlp=8, max_len=8))
    sk = ParamSketch.build(m, block_path="blocks", last_blocks=1, dim=65536, seed=0)
    assert sk.dim == sum(p.numel() for p in m.blocks[0].parameters())


@pytest.mark.slow
def test_ddp_all_reduced_sketch_equals_single_process_sketch(tmp_path):
    import real_runs_ddp_worker as worker
    out = tmp_path / "rank0.npz"
    proc = torchrun(HERE / "real_runs_ddp_worker.py", out, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = np.load(out)
    ref = worker.single_process()
    assert float(got["n_tokens"]) == worker.global_batch().n_tokens
    assert np.linalg.norm(ref["sketch"]) > 0 and ref["grad_norm"] > 0.005      # the clip is active
    np.testing.assert_allclose(got["sketch"], ref["sketch"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(got["grad_norm"], ref["grad_norm"], rtol=1e-5)
    np.testing.assert_allclose(got["update"], ref["update"], rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(got["params"], ref["params"], rtol=1e-5, atol=1e-7)
    assert np.abs(ref["update"]).max() > 0


def test_benchmark_sketch_gather_2b_shaped(benchmark):
    from real_runs.native.bench import gradient_sketch_fixture, two_b_last_blocks

    sk = gradient_sketch_fixture("cpu")   # last 4 blocks of a 2B model, ~0.9 GB of resident gradients
    assert len(sk.names) == len(two_b_last_blocks()) == 36
    out = benchmark(sk.grad)
    assert out.shape == (65536,) and float(out.sum()) == 65536.0
