"""GRPO maths and the optimizer step of a real run, in torch.

One optimizer step, as `native.adapter.GRPOAdapter.train_step` calls it:
  `build_rows` (rows of (prompt, completion) with their advantages) ->
  `accumulate_gradients` (micro-batched PPO-clip + k3-KL token loss, token-mean over the
  GLOBAL batch, backward) -> `sketch_and_update` (gradient sketch before clipping and the
  step, SUM all-reduce of the sketch and of the gradients across ranks, clip, Adam step,
  update sketch on the same coordinates).

Departures from the paper's recipe (seed note §6), on purpose:
* the policy is a small byte-level transformer trained from a supervised warm start on
  demonstrations (no pretrained LLM can be downloaded); an optional Hugging Face
  checkpoint goes through the same code (`real_runs.native.hf`). Its input adds an embedding of
  the previous byte (token shift) so that two blocks learn to copy from the context;
* Adam's learning rate defaults to 1e-3-scale for the small models (paper: 1e-6 for 2B);
* prompt and reply lengths are hundreds of bytes, not 40,000 / 8,192 tokens;
* a multi-turn episode is trained on its transcript: turns whose next context extends
  (context + reply) share one row with a mask on every reply; a context cut on the left
  (longer than max_len) starts a new row. Every reply token carries the trajectory's
  advantage, so l_i = |A_i| as with outcome rewards;
* gradients are synchronised by an explicit SUM all-reduce after the sketch (each rank's
  loss is divided by the global token count), instead of DDP's mean hooks: the sketch is
  taken from local gradients and SUMmed, which equals the global gradient's sketch;
* the rollout log-probs are those recorded while sampling (KV-cached, temperature-1
  scale); for a fresh group the ratio is 1 up to float rounding, for a leftover group it
  is the probability ratio since generation, and the clip acts on it.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from hbsim.grpo import advantages as group_advantages
from real_runs.native.model import prefill, right_pad, token_logprobs
from real_runs.native.sketch import ParamSketch, all_reduce_grads, all_reduce_sum


@dataclass
class Turn:
    """One model call: the prompt tokens it saw, its completion and their rollout log-probs."""

    prompt: list[int]
    completion: list[int]
    logprobs: list[float]


@dataclass
class Group:
    """G rollouts of one task on one harness. rewards: (G,); turns[i]: the turns of rollout i."""

    harness: int
    task: str
    rewards: np.ndarray
    turns: list[list[Turn]]
    born: int  # optimizer step at which it was generated (for leftover age)


@dataclass
class Rows:
    """The training rows of a batch, in batch order.

    tokens: token lists; spans: per row, (start, length) of each completion in the
    log-prob axis (entry t scores token t+1); old_logp: per row, the rollout log-probs of
    its spans, concatenated; adv: the row's advantage; traj: global trajectory index;
    group: group index.
    """

    tokens: list[list[int]]
    spans: list[list[tuple[int, int]]]
    old_logp: list[list[float]]
    adv: list[float]
    traj: list[int]
    group: list[int]

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_tokens(self) -> int:
        return int(sum(len(lp) for lp in self.old_logp))


def merge_turns(turns: list[Turn]) -> list[tuple[list[int], list[tuple[int, int]], list[float]]]:
    """Consecutive turns whose next prompt extends (prompt + completion) share one row, so
    a multi-turn transcript is scored once; a prompt cut on the left starts a new row."""
    rows = []
    for turn in turns:
        if rows and turn.prompt[:len(rows[-1][0])] == rows[-1][0]:
            tokens, spans, logp = rows[-1]
            tokens = turn.prompt + turn.completion
        else:
            tokens, spans, logp = turn.prompt + turn.completion, [], []
            rows.append(None)
        spans = spans + [(len(turn.prompt) - 1, len(turn.completion))]
        rows[-1] = (tokens, spans, logp + list(turn.logprobs))
    return rows


def build_rows(groups: list[Group], kind: str = "loo") -> Rows:
    """Flatten groups into training rows with the trajectory's advantage (SPEC §2.1)."""
    rows = Rows([], [], [], [], [], [])
    traj = 0
    for g_index, group in enumerate(groups):
        adv = group_advantages(np.asarray(group.rewards, dtype=np.float64), kind)  # (G,)
        for i, turns in enumerate(group.turns):
            for tokens, spans, logp in merge_turns(turns):
                rows.tokens.append(tokens)
                rows.spans.append(spans)
                rows.old_logp.append(logp)
                rows.adv.append(float(adv[i]))
                rows.traj.append(traj)
                rows.group.append(g_index)
            traj += 1
    return rows


def pad_rows(rows: Rows, select: list[int], device, cut: list[int] | None = None) -> dict[str, torch.Tensor]:
    """Tensors of the selected rows: tokens/valid (B, T), and in log-prob space (B, T-1):
    mask, old_logp, adv (per token). cut: per selected row, a number of leading tokens left
    out (the rows' tails from token cut on; their spans shift by -cut)."""
    cut = cut or [0] * len(select)
    tokens, valid = right_pad([rows.tokens[i][c:] for i, c in zip(select, cut)], device)
    B, T = tokens.shape
    mask = torch.zeros(B, T - 1)
    old = torch.zeros(B, T - 1)
    adv = torch.zeros(B, T - 1)
    for b, (i, c) in enumerate(zip(select, cut)):
        lp, k = rows.old_logp[i], 0
        for s, n in rows.spans[i]:
            mask[b, s - c:s - c + n] = 1.0
            old[b, s - c:s - c + n] = torch.tensor(lp[k:k + n])
            adv[b, s - c:s - c + n] = rows.adv[i]
            k += n
    return {"tokens": tokens, "valid": valid, "mask": mask.to(device), "old_logp": old.to(device),
            "adv": adv.to(device)}


def prompt_cut(rows: Rows, i: int) -> int:
    """Row i's tokens before its last context token: tokens[:cut] are never scored and never
    followed by a scored position (cut = the log-prob entry of its first trained token)."""
    return rows.spans[i][0][0] if rows.spans[i] else max(len(rows.tokens[i]) - 1, 0)


def shared_prompt_logprobs(model, rows: Rows, select: list[int], cut: list[int], tails: dict) -> torch.Tensor:
    """Teacher-forced log-probs of the selected rows' tails, each distinct prompt run once.

    A group's G rollouts share one prompt: its tokens before the last (`prompt_cut`) go
    through the model once per distinct prompt (`model.prefill`, with gradient), the cache rows
    are repeated for the rollouts, and the tails (the prompt's last token, the completion,
    any later turns; `pad_rows(..., cut)` = `tails`) run on that cache. Causal attention
    makes this the same function of the weights as running every row in full, so loss and
    gradient agree up to float rounding, at (prompt + G x completion) positions per group
    instead of G x (prompt + completion). Returns (B, Tt-1): entry j scores tail token j+1.
    """
    device = tails["tokens"].device
    unique: dict[tuple[int, ...], int] = {}
    row_of = [unique.setdefault(tuple(rows.tokens[i][:c]), len(unique)) for i, c in zip(select, cut)]
    _, cache, valid = prefill(model, list(unique), tails["tokens"].shape[1])   # (U, P) key mask
    P = valid.shape[1]
    index = torch.tensor(row_of, dtype=torch.long, device=device)
    cache = model.select_cache(cache, index)          # a copy per rollout (autograd-safe for in-place caches)
    keys = torch.cat([valid[index], tails["valid"]], dim=1)              # (B, P + Tt)
    positions = (keys.long().cumsum(1) - 1).clamp(min=0)[:, P:]
    logits = model(tails["tokens"], positions, keys, cache, P)           # (B, Tt, V)
    return torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, tails["tokens"][:, 1:, None]).squeeze(-1)


def grpo_token_loss(logp, old_logp, ref_logp, adv, mask, *, clip_low: float = 0.2,
                    clip_high: float = 0.2, kl_coef: float = 0.05):
    """Per-token GRPO objective; all inputs (B, T) -> (loss_sum, stats).

    ratio = exp(logp - old_logp); pg = -min(ratio A, clip(ratio, 1-clip_low, 1+clip_high) A);
    k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman's unbiased, non-negative KL estimator);
    loss_sum = sum over masked tokens of (pg + kl_coef * k3). Divide by the token count of
    the whole optimizer batch for the token-mean (done by the caller, across micro-batches
    and ranks). ref_logp may be None when kl_coef == 0.
    """
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg = -torch.minimum(ratio * adv, clipped * adv)
    k3 = torch.zeros_like(pg)
    if ref_logp is not None and kl_coef:
        delta = ref_logp - logp
        k3 = torch.exp(delta) - delta - 1.0
    loss_sum = ((pg + kl_coef * k3) * mask).sum()
    with torch.no_grad():
        was_clipped = ((ratio * adv) > (clipped * adv)).float() * mask
        stats = {"kl_sum": float((k3.detach() * mask).sum()), "clipped": float(was_clipped.sum()),
                 "ratio_sum": float((ratio.detach() * mask).sum())}
    return loss_sum, stats


def token_learnability(adv: torch.Tensor, mask: torch.Tensor, traj: torch.Tensor,
                       group: torch.Tensor) -> float | None:
    """SPEC §2.3 on ragged per-turn rows: adv, mask (R, T); traj, group (R,) long.

    l_i = sum over all tokens of trajectory i of M|A| / sum of M; L = mean over groups of
    the mean of l_i over the group's trajectories (trajectories without tokens skipped).
    Returns None for an empty batch.
    """
    if adv.shape[0] == 0:
        return None
    n_traj = int(traj.max()) + 1
    num = torch.zeros(n_traj, dtype=torch.float64).index_add_(0, traj, (mask * adv.abs()).sum(1).double())
    den = torch.zeros(n_traj, dtype=torch.float64).index_add_(0, traj, mask.sum(1).double())
    ok = den > 0
    l_traj = torch.where(ok, num / den.clamp(min=1e-300), torch.zeros_like(num))
    traj_group = torch.zeros(n_traj, dtype=torch.long).index_copy_(0, traj, group)
    n_group = int(group.max()) + 1
    g_sum = torch.zeros(n_group, dtype=torch.float64).index_add_(0, traj_group, l_traj)
    g_cnt = torch.zeros(n_group, dtype=torch.float64).index_add_(0, traj_group, ok.double())
    keep = g_cnt > 0
    if not bool(keep.any()):
        return None
    return float((g_sum[keep] / g_cnt[keep]).mean())


def global_sum(value: float, device) -> float:
    """Sum of a scalar over ranks (identity outside torch.distributed)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        t = torch.tensor([float(value)], dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return float(t.item())
    return float(value)


def first_scored(mask: torch.Tensor) -> int:
    """The first log-prob column (B, T-1) any row of the micro-batch trains on (0 if none)."""
    cols = torch.nonzero(mask.any(0))
    return int(cols[0]) if len(cols) else 0


def accumulate_gradients(model, ref, rows: Rows, *, micro_batch: int, n_tokens_global: float,
                         clip_low: float, clip_high: float, kl_coef: float, share_prompts: bool = True,
                         autocast: str = "") -> dict:
    """Micro-batched backward of the token-mean GRPO loss; gradients accumulate in `.grad`.

    n_tokens_global: completion tokens of the whole optimizer batch over all ranks.
    share_prompts: run each distinct prompt of a micro-batch once (`shared_prompt_logprobs`);
    False: every row in full, scored from the micro-batch's first trained column on.
    autocast: a dtype name ("bfloat16") to run the forward (and so the backward) under
    torch.autocast; the log-probs, the loss and every parameter stay float32.
    """
    device = next(model.parameters()).device
    stats = {"loss": 0.0, "kl_sum": 0.0, "clipped": 0.0, "ratio_sum": 0.0}
    for lo in range(0, len(rows), micro_batch):
        select = list(range(lo, min(lo + micro_batch, len(rows))))
        cut = [prompt_cut(rows, i) for i in select]
        if share_prompts and min(cut) > 0:
            batch = pad_rows(rows, select, device, cut)

            def score(m):
                return shared_prompt_logprobs(m, rows, select, cut, batch)
        else:
            batch = pad_rows(rows, select, device)
            keep_from = first_scored(batch["mask"])     # the prompt before it needs no vocabulary projection

            def score(m):
                return token_logprobs(m, batch["tokens"], batch["valid"], keep_from)  # (B, T-1)
        with torch.autocast(device.type, dtype=getattr(torch, autocast)) if autocast else contextlib.nullcontext():
            logp = score(model).float()
            ref_logp = None
            if kl_coef:
                with torch.no_grad():
                    ref_logp = score(ref).float()
        loss_sum, s = grpo_token_loss(logp, batch["old_logp"], ref_logp, batch["adv"], batch["mask"],
                                      clip_low=clip_low, clip_high=clip_high, kl_coef=kl_coef)
        (loss_sum / n_tokens_global).backward()
        stats["loss"] += float(loss_sum.detach()) / n_tokens_global
        for k in ("kl_sum", "clipped", "ratio_sum"):
            stats[k] += s[k]
    return stats


def sketch_and_update(model, optimizer, sketch: ParamSketch, *, update_sketch: bool, max_grad_norm: float):
    """The end of every optimizer step (the adapter's and the DDP test's): the local gradients'
    sketch SUMmed over ranks BEFORE clipping, then `apply_update` (with the update sketch when
    `update_sketch`). Returns (sketch (dim,) float32 numpy, update sketch or None, grad_norm,
    seconds by phase: sketch, allreduce, optimizer, update norm: the L2 norm of the parameter
    delta of the optimizer step over every trainable parameter, the same on every rank)."""
    t0 = time.perf_counter()
    local = sketch.grad()
    t1 = time.perf_counter()
    raw = all_reduce_sum(local)
    t2 = time.perf_counter()
    params = [p for p in model.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in params]      # one copy of the trainable weights, for the norm
    grad_norm, upd = apply_update(model, optimizer, sketch if update_sketch else None, max_grad_norm)
    update_norm = parameter_delta_norm(params, before)
    t3 = time.perf_counter()
    raw_np = raw.cpu().numpy()
    update = upd.cpu().numpy() if upd is not None else None
    seconds = {"sketch": (t1 - t0) + (time.perf_counter() - t3), "allreduce": t2 - t1, "optimizer": t3 - t2}
    return raw_np, update, grad_norm, seconds, update_norm


def parameter_delta_norm(params, before) -> float:
    """L2 norm of (params - before) over all tensors, in float64."""
    total = torch.zeros((), dtype=torch.float64, device=params[0].device) if params else torch.zeros(())
    for p, b in zip(params, before):
        total += ((p.detach() - b).double() ** 2).sum()
    return float(total.sqrt())


def apply_update(model, optimizer, sketch: ParamSketch | None, max_grad_norm: float):
    """SUM all-reduce of gradients, clip, Adam step. Returns (grad_norm, update sketch or None)."""
    params = [p for p in model.parameters() if p.requires_grad]
    all_reduce_grads(params)
    before = sketch.values() if sketch is not None else None
    norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm) if max_grad_norm > 0 else \
        torch.sqrt(sum((p.grad.float() ** 2).sum() for p in params if p.grad is not None))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    update = sketch.values() - before if sketch is not None else None
    return float(norm), update
