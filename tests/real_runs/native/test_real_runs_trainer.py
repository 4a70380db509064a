"""GRPO maths of the real trainer on hand-computed tensors, and one optimizer step."""
import copy
import math

import numpy as np
import pytest
import torch

from hbsim.grpo import advantages, learnability
from real_runs.native.model import ByteTokenizer, ModelConfig, Transformer, sample
from real_runs.native.sketch import ParamSketch
from real_runs.native.trainer import (Group, Turn, accumulate_gradients, apply_update, build_rows, grpo_token_loss,
                                      pad_rows, prompt_cut, token_learnability)


def _t(values):
    return torch.tensor([values], dtype=torch.float32)


def test_ppo_clip_both_ways_and_k3_kl_by_hand():
    # token 0: ratio e^0.5 = 1.6487 > 1.2, A = +1  -> clipped: pg = -1.2
    # token 1: ratio e^-0.5 = 0.6065 < 0.8, A = -1 -> clipped: pg = +0.8
    # token 2: ratio e^0.5, A = -1 -> unclipped (pessimistic side): pg = +1.6487
    # token 3: ratio e^0.1 = 1.1052 inside, A = +2 -> pg = -2.2103
    # token 4: masked out
    logp = _t([-1.0, -1.0, -1.0, -1.0, -1.0]).requires_grad_(True)
    old = _t([-1.5, -0.5, -1.5, -1.1, -3.0])
    ref = _t([-1.2, -0.7, -1.0, -1.0, -9.0])
    adv = _t([1.0, -1.0, -1.0, 2.0, 5.0])
    mask = _t([1, 1, 1, 1, 0])
    loss, stats = grpo_token_loss(logp, old, ref, adv, mask, clip_low=0.2, clip_high=0.2, kl_coef=0.05)
    pg = [-1.2, 0.8, math.exp(0.5), -2.0 * math.exp(0.1)]
    deltas = [-0.2, 0.3, 0.0, 0.0]
    k3 = [math.exp(d) - d - 1.0 for d in deltas]
    assert k3[0] == pytest.approx(0.018730753, abs=1e-8) and k3[2] == 0.0
    expected = sum(pg) + 0.05 * sum(k3)
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert stats["clipped"] == 2.0
    assert stats["kl_sum"] == pytest.approx(sum(k3), rel=1e-6)
    loss.backward()
    g = logp.grad[0]
    # clipped tokens carry only the KL gradient: d/dlogp k3 = 1 - e^delta (times 0.05)
    assert float(g[0]) == pytest.approx(0.05 * (1 - math.exp(-0.2)), rel=1e-5)
    assert float(g[1]) == pytest.approx(0.05 * (1 - math.exp(0.3)), rel=1e-5)
    # unclipped: d/dlogp (-ratio A) = -ratio A
    assert float(g[2]) == pytest.approx(math.exp(0.5), rel=1e-5)
    assert float(g[3]) == pytest.approx(-2.0 * math.exp(0.1), rel=1e-5)
    assert float(g[4]) == 0.0


def test_asymmetric_clip_and_no_kl():
    logp = _t([0.0, 0.0])
    old = _t([-0.25, 0.25])  # ratios e^0.25 = 1.284, e^-0.25 = 0.7788
    adv = _t([1.0, -1.0])
    loss, stats = grpo_token_loss(logp, old, None, adv, _t([1, 1]), clip_low=0.1, clip_high=0.28, kl_coef=0.0)
    # token 0: min(1.284, 1.28) = 1.28 -> -1.28 ; token 1: min(-0.7788, -0.9) = -0.9 -> +0.9
    assert float(loss) == pytest.approx(-1.28 + 0.9, rel=1e-6)
    assert stats["kl_sum"] == 0.0 and stats["clipped"] == 2.0


def _group(rewards, lens, harness=0):
    """A group whose rollout i has turns of completion lengths lens[i] (each turn its own
    row: every prompt starts afresh with 3 tokens)."""
    turns = [[Turn([1, 2, 3], [7] * n, [-0.5] * n) for n in per] for per in lens]
    return Group(harness, "t", np.asarray(rewards, dtype=float), turns, born=0)


def test_multi_turn_transcript_shares_one_row_unless_the_context_was_cut():
    t1 = Turn([1, 2], [3, 4], [-0.1, -0.2])
    t2 = Turn([1, 2, 3, 4, 9], [5], [-0.3])          # context = prompt + reply + observation 9
    t3 = Turn([4, 9, 5, 8], [6, 6], [-0.4, -0.5])     # cut on the left: a new row
    rows = build_rows([Group(0, "t", np.array([1.0, 0.0]), [[t1, t2, t3], [t1]], 0)])
    assert rows.tokens[0] == [1, 2, 3, 4, 9, 5] and rows.spans[0] == [(1, 2), (4, 1)]
    assert rows.old_logp[0] == [-0.1, -0.2, -0.3]
    assert rows.tokens[1] == [4, 9, 5, 8, 6, 6] and rows.spans[1] == [(3, 2)]
    assert rows.traj == [0, 0, 1] and rows.n_tokens == 3 + 2 + 2
    b = pad_rows(rows, [0], "cpu")
    assert b["mask"].tolist() == [[0, 1, 1, 0, 1]]
    assert b["old_logp"][0].tolist() == pytest.approx([0, -0.1, -0.2, 0, -0.3])
    # the tails the shared-prompt backward runs: from the last context token on
    assert [prompt_cut(rows, i) for i in range(3)] == [1, 3, 1]
    tail = pad_rows(rows, [0, 1], "cpu", cut=[1, 3])
    assert tail["tokens"].tolist() == [[2, 3, 4, 9, 5], [8, 6, 6, 0, 0]]
    assert tail["valid"].sum(1).tolist() == [5, 3]
    assert tail["mask"].tolist() == [[1, 1, 0, 1], [1, 1, 0, 0]]
    assert tail["old_logp"].flatten().tolist() == pytest.approx([-0.1, -0.2, 0, -0.3, -0.4, -0.5, 0, 0])


def test_rows_carry_loo_advantages_and_masks():
    rows = build_rows([_group([1.0, 0.0, 0.0, 1.0], [[2], [1, 3], [2], [1]])])
    # LOO: A_i = G/(G-1) (r_i - mean) = 4/3 * (+-0.5) = +-2/3
    assert rows.adv == pytest.approx([2 / 3, -2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert rows.traj == [0, 1, 1, 2, 3] and rows.group == [0] * 5
    batch = pad_rows(rows, [1], "cpu")
    # prompt of 3 tokens: the completion's log-probs sit at entries 2.. of the T-1 axis
    assert batch["mask"].tolist() == [[0.0, 0.0, 1.0]]
    assert batch["adv"][0, 2].item() == pytest.approx(-2 / 3)


def test_token_learnability_equals_hbsim_and_closed_form():
    rng = np.random.default_rng(0)
    groups = [_group(rng.integers(0, 2, 8).astype(float), [[int(n)] for n in rng.integers(1, 5, 8)])
              for _ in range(5)]
    groups.append(_group([1, 1, 1, 0, 0, 0, 0, 0], [[2, 1]] * 8))  # k = 3: L = 2*3*5/56
    rows = build_rows(groups)
    batch = pad_rows(rows, list(range(len(rows))), "cpu")
    got = token_learnability(batch["adv"], batch["mask"], torch.tensor(rows.traj), torch.tensor(rows.group))
    ref = learnability(advantages(np.stack([g.rewards for g in groups])))
    assert got == pytest.approx(ref, rel=1e-6)  # float32 token tensors
    last = build_rows(groups[-1:])
    b = pad_rows(last, list(range(len(last))), "cpu")
    one = token_learnability(b["adv"], b["mask"], torch.tensor(last.traj), torch.tensor(last.group))
    assert one == pytest.approx(2 * 3 * 5 / 56)


def test_token_learnability_with_ragged_masks_matches_padded_hbsim():
    # per-token advantages that vary along the trajectory (not only outcome rewards)
    adv = torch.tensor([[0.5, -1.0, 0.0], [2.0, 0.0, 0.0], [1.0, 1.0, -3.0], [0.25, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    traj = torch.tensor([0, 1, 2, 3])
    group = torch.tensor([0, 0, 1, 1])
    got = token_learnability(adv, mask, traj, group)
    # l = [0.75, 2.0 | 5/3, 0.25]; groups: 1.375, 0.9583; L = 1.16667
    assert got == pytest.approx((1.375 + (5 / 3 + 0.25) / 2) / 2)
    padded = learnability(adv.numpy().reshape(2, 2, 3), mask.numpy().reshape(2, 2, 3))
    assert got == pytest.approx(padded)


@pytest.fixture(scope="module")
def tiny_batch():
    gen = torch.Generator().manual_seed(0)
    model = Transformer(ModelConfig(n_layer=2, d_model=32, n_head=2, d_mlp=64, max_len=64), gen)
    tok = ByteTokenizer()
    prompts = [tok.encode(f"task {i}: say hi\n> ") for i in range(8)]
    comps, lps = sample(model, prompts, [10] * 8, 6, torch.Generator().manual_seed(1))
    groups = [Group(h, f"t{h}", np.array(r, dtype=float),
                    [[Turn(prompts[4 * h + i], comps[4 * h + i], lps[4 * h + i])] for i in range(4)], 0)
              for h, r in ((0, [1, 0, 0, 1]), (1, [0.5, 0, 1, 0]))]
    return model, build_rows(groups)


def _sketch(model):
    return ParamSketch.build(model, block_path="blocks", last_blocks=2, dim=500, seed=3)


def test_one_step_changes_every_parameter_and_sketch_is_pre_clip_gradient(tiny_batch):
    from policies.sketch import plan_sketch

    model = copy.deepcopy(tiny_batch[0])
    rows = tiny_batch[1]
    ref = copy.deepcopy(model).requires_grad_(False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    sk = _sketch(model)
    accumulate_gradients(model, ref, rows, micro_batch=3, n_tokens_global=rows.n_tokens,
                         clip_low=0.2, clip_high=0.2, kl_coef=0.05)
    raw = sk.grad()
    # independently: the planner's coordinates, in sorted-name order, of the raw gradient
    named = {n: p for n, p in model.named_parameters() if n.startswith("blocks.")}
    plan = plan_sketch({n: tuple(p.shape) for n, p in named.items()}, 500, 3)
    expected = np.concatenate([named[n].grad.numpy().reshape(-1)[plan[n]] for n in sorted(plan)])
    assert raw.shape == (500,) and np.array_equal(raw.numpy(), expected)
    pre_norm = torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters())).item()
    norm, update = apply_update(model, opt, sk, max_grad_norm=1e-3)   # clipping is active
    assert norm == pytest.approx(pre_norm, rel=1e-5) and pre_norm > 1e-3
    changed = {n: not torch.equal(before[n], p.detach()) for n, p in model.named_parameters()}
    assert all(changed.values()), [n for n, c in changed.items() if not c]
    delta = np.concatenate([(named[n].detach() - before[n]).numpy().reshape(-1)[plan[n]] for n in sorted(plan)])
    assert np.allclose(update.numpy(), delta, atol=1e-7)


def test_micro_batching_does_not_change_the_gradient(tiny_batch):
    model, rows = tiny_batch
    grads = []
    for micro in (1, 3, 64):
        m = copy.deepcopy(model)
        accumulate_gradients(m, copy.deepcopy(model), rows, micro_batch=micro, n_tokens_global=rows.n_tokens,
                             clip_low=0.2, clip_high=0.2, kl_coef=0.05)
        grads.append(torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-6) and torch.allclose(grads[0], grads[2], atol=1e-6)


def test_skipping_the_prompts_vocabulary_projection_keeps_the_gradient(tiny_batch, monkeypatch):
    """Without shared prompts, accumulate_gradients scores only from the micro-batch's first
    trained column on (`first_scored`): the same loss and gradient as scoring every position."""
    import real_runs.native.trainer as trainer
    model, rows = tiny_batch
    batch = trainer.pad_rows(rows, [0, 1, 2], "cpu")
    prompt = len(rows.tokens[0]) - sum(n for _, n in rows.spans[0])
    assert trainer.first_scored(batch["mask"]) == prompt - 1 > 0          # column t scores token t+1
    assert trainer.first_scored(torch.zeros(2, 5)) == 0
    got = {}
    for name, first in (("skip", trainer.first_scored), ("full", lambda mask: 0)):
        monkeypatch.setattr(trainer, "first_scored", first)
        m = copy.deepcopy(model)
        stats = accumulate_gradients(m, copy.deepcopy(model), rows, micro_batch=3, n_tokens_global=rows.n_tokens,
                                     clip_low=0.2, clip_high=0.2, kl_coef=0.05, share_prompts=False)
        got[name] = (stats, torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
    assert got["skip"][0] == pytest.approx(got["full"][0], rel=1e-6, abs=1e-9)
    assert torch.allclose(got["skip"][1], got["full"][1], atol=1e-7) and got["full"][1].abs().sum() > 0


def sampled_rows(model, encode, stop: int):
    """Two groups of 4 sampled rollouts whose prompts share a system line and differ in length
    (padding in the shared-prompt pass) and whose completions do too (right padding), rewards
    that give every rollout an advantage."""
    system = "Answer in one line.\n"                   # a common prefix (a Hugging Face model runs it once)
    prompts = [encode(system + "task 1: hi\n> ")] * 4 + [encode(system + "task 22: say hello\n> ")] * 4
    comps, lps = sample(model, prompts, [stop] * 8, 6, torch.Generator().manual_seed(1))
    cut = [6 - i % 3 for i in range(8)]            # completions of 6, 5 and 4 tokens
    comps, lps = [c[:n] for c, n in zip(comps, cut)], [lp[:n] for lp, n in zip(lps, cut)]
    return build_rows([Group(h, f"t{h}", np.array(r, dtype=float),
                             [[Turn(prompts[4 * h + i], comps[4 * h + i], lps[4 * h + i])] for i in range(4)], 0)
                       for h, r in ((0, [1, 0, 0, 1]), (1, [0.5, 0, 1, 0]))])


def check_shared_prompts(model, rows, micro_batch: int = 3):
    """`share_prompts` on and off give the same loss statistics and gradient, and the shared
    pass runs fewer token positions through the model (each distinct prompt once per micro-batch)."""
    ref = copy.deepcopy(model).requires_grad_(False)
    with torch.no_grad():                          # a reference that differs: the KL term is not 0
        for p in ref.parameters():
            p.mul_(0.9)
    got = {}
    for share in (True, False):
        m, seen = copy.deepcopy(model), []
        m.register_forward_pre_hook(lambda mod, args: seen.append(args[0].numel()))
        stats = accumulate_gradients(m, ref, rows, micro_batch=micro_batch, n_tokens_global=rows.n_tokens,
                                     clip_low=0.2, clip_high=0.2, kl_coef=0.05, share_prompts=share)
        got[share] = (stats, torch.cat([p.grad.reshape(-1) for p in m.parameters() if p.grad is not None]), sum(seen))
    assert got[True][0] == pytest.approx(got[False][0], rel=1e-5, abs=1e-9) and got[False][0]["kl_sum"] > 0
    scale = got[False][1].abs().max()
    assert scale > 0 and (got[True][1] - got[False][1]).abs().max() <= 1e-5 * scale
    full = sum(len(t) for t in rows.tokens)
    assert got[False][2] >= full > got[True][2], (got[True][2], got[False][2], full)
    return got


def test_shared_prompts_keep_loss_and_gradient():
    """The shared-prompt backward is the same function of the weights (causal attention):
    prompts of two lengths, completions of several, micro-batches that split a group."""
    model = Transformer(ModelConfig(n_layer=2, d_model=32, n_head=2, d_mlp=64, max_len=64),
                        torch.Generator().manual_seed(0))
    rows = sampled_rows(model, ByteTokenizer().encode, 10)
    assert len({len(t) for t in rows.tokens}) == 6
    check_shared_prompts(model, rows, micro_batch=3)
    check_shared_prompts(model, rows, micro_batch=8)


def test_autocast_backward_is_close_and_keeps_float32_gradients(tiny_batch):
    """train_autocast=bfloat16: the forward and backward run in bfloat16 (the gradient moves
    off the float32 one, a little), while gradients and weights stay float32."""
    model, rows = tiny_batch
    got = {}
    for autocast in ("", "bfloat16"):
        m = copy.deepcopy(model)
        stats = accumulate_gradients(m, copy.deepcopy(model), rows, micro_batch=3, n_tokens_global=rows.n_tokens,
                                     clip_low=0.2, clip_high=0.2, kl_coef=0.05, autocast=autocast)
        assert all(p.grad.dtype == torch.float32 and p.dtype == torch.float32 for p in m.parameters())
        got[autocast] = (stats, torch.cat([p.grad.reshape(-1) for p in m.parameters()]))
    full, low = got[""][1], got["bfloat16"][1]
    cosine = float(full @ low / (full.norm() * low.norm()))
    assert 0.99 < cosine < 1.0 - 1e-7, cosine
    assert got["bfloat16"][0]["ratio_sum"] == pytest.approx(got[""][0]["ratio_sum"], rel=0.05)
