"""Supervised warm start on demonstrations of a SUBSET of the training harnesses.

A base model knows some agent interfaces and not others. We mimic that: the model is
trained by next-token cross-entropy on the completions (never the prompts or the
observations) of demonstrated episodes of the first `warm_harnesses` training harnesses
only, for `warm_steps` Adam steps of `warm_batch` episodes, learning rate `warm_lr` with
a linear warm-up over the first 5% of the steps and a cosine decay to 10%. Harnesses that
share notation with those start with some success; the rest start near zero.

Demonstrations come from the first `warm_tasks` tasks of the seed's task stream (the
training tasks come first; 0 = the training tasks only), minus any task equal to a
held-out task. More distinct tasks than the 300 training tasks teach the model to COPY
names and contents from its context instead of memorising the training tasks, so
held-out tasks start above zero too. Optionally (`warm_other_tasks` = k > 0) the other
training harnesses are demonstrated on the first k of those tasks only: like a base model
that has seen a little of every interface, they then start near zero but not at exactly
zero, so GRPO groups on them can have reward variance.

`warm_counts` = "n_1,...,n_H" instead demonstrates training harness h on the first n_h warm
tasks (the `cpu-world` preset: a different start for every harness).

The result depends only on (seed, model shape, warm-start knobs, task world), so it is
cached per seed under the cache directory and shared by every policy of that seed
(common random numbers). Concurrent workers wait on a file lock instead of training
the same model twice; the file is written atomically.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
from pathlib import Path

import torch

from hbsim.contract.atomic import atomic_write
from policies.errors import UserError
from real_runs import streams
from real_runs.native.model import ByteTokenizer, ModelConfig, Transformer, right_pad
from policies.validate import comma_items
from real_runs.native.presets import model_dict
from real_runs.native.trainer import Turn, merge_turns
from real_runs.world.episode import Episode
from real_runs.world.tasks import make_tasks

CACHE_VERSION = 3


def demonstration_rows(harnesses: list, tasks: list, max_len: int, max_new: int) -> list[tuple[list[int], list]]:
    """(tokens, completion spans) per demonstrated episode: the turns of a multi-turn
    demonstration share one row, exactly as the GRPO trainer lays out its rollouts."""
    tok = ByteTokenizer()
    rows = []
    for h in harnesses:
        for task in tasks:
            ep, turns = Episode(h, task), []
            for completion in h.demonstration(task):
                prompt = tok.encode(ep.context())[-(max_len - max_new):]
                reply = tok.encode(completion)[:max_new]
                turns.append(Turn(prompt, reply, [0.0] * len(reply)))
                if ep.feed(completion):
                    break
            rows.extend((tokens, spans) for tokens, spans, _ in merge_turns(turns))
    return rows


def warm_tasks(cfg, seed: int, train_tasks: list, heldout_tasks: list) -> list:
    """The demonstrated tasks: the training tasks, or the first `cfg.warm_tasks` tasks of
    the seed's stream (which start with the training tasks) minus held-out instances."""
    if cfg.warm_tasks <= len(train_tasks):
        return list(train_tasks)
    stream = make_tasks(seed, n_train=cfg.warm_tasks, n_heldout=0)[0]
    held = {t.signature() for t in heldout_tasks}
    return [t for t in stream if t.signature() not in held]


def completion_mask(rows: list[tuple[list[int], list]], width: int) -> torch.Tensor:
    """(B, width) bool in log-prob space (entry t scores token t+1): True exactly at the
    completion tokens of each row's spans."""
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for b, (_, spans) in enumerate(rows):
        for start, n in spans:
            mask[b, start:start + n] = True
    return mask


def sft_loss(model: Transformer, rows: list[tuple[list[int], list]], device) -> torch.Tensor:
    """Mean cross-entropy of the completion tokens given their contexts (token-mean).
    The output layer runs on completion positions only (the prompts are most tokens)."""
    tokens, valid = right_pad([t for t, _ in rows], device)
    mask = completion_mask(rows, tokens.shape[1] - 1).to(tokens.device)  # (B, T-1)
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)
    h = model.hidden(tokens, positions, None)[:, :-1][mask]  # (N, C)
    logp = torch.log_softmax(model.lm_head(h).float(), dim=-1)
    return -logp.gather(-1, tokens[:, 1:][mask][:, None]).mean()


def lr_at(cfg, step: int) -> float:
    """Linear warm-up over the first 5% of the steps, then cosine decay to 10% of warm_lr."""
    warm = max(1, cfg.warm_steps // 20)
    if step < warm:
        return cfg.warm_lr * (step + 1) / warm
    frac = (step - warm) / max(1, cfg.warm_steps - warm)
    return cfg.warm_lr * (0.1 + 0.45 * (1.0 + math.cos(math.pi * frac)))


def train_warm(cfg, seed: int, rows, device, progress=None) -> dict:
    """Initialise the model from `seed` and fit the demonstrations; returns a CPU state_dict.
    progress(done, total) is called before the first step and after every step."""
    init = torch.Generator().manual_seed(streams.torch_seed32(seed, streams.WARM_INIT))
    model = Transformer(ModelConfig(**model_dict(cfg)), init).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warm_lr, weight_decay=0.0)
    rng = streams.rng(seed, streams.WARM_BATCH)
    if progress is not None:
        progress(0, cfg.warm_steps)
    for step in range(cfg.warm_steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(cfg, step)
        pick = rng.choice(len(rows), size=min(cfg.warm_batch, len(rows)), replace=False)
        loss = sft_loss(model, [rows[i] for i in pick], device)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if progress is not None:
            progress(step + 1, cfg.warm_steps)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def cache_root(cache_dir: str = "") -> Path:
    """The one cache folder of real runs (warm starts, converted models), created:
    `cache_dir` (the knob), else $HB_CACHE_DIR, else ~/.cache/harnessbandit."""
    root = Path(cache_dir or os.environ.get("HB_CACHE_DIR") or Path.home() / ".cache" / "harnessbandit")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UserError(f"cache {str(root)!r} (cache_dir / HB_CACHE_DIR) is not a folder: a file is "
                        "in its place; choose another cache folder") from None
    return root


def warm_key(cfg, seed: int, rows, device_type: str = "cpu") -> str:
    """Cache key: seed, model shape, warm-start knobs, device type (numerics differ) and a
    digest of the demonstration data."""
    digest = hashlib.sha256()
    for tokens, spans in rows:
        digest.update(bytes(tokens) + repr(spans).encode() + b"\x01")
    spec = {"v": CACHE_VERSION, "seed": seed, "model": model_dict(cfg), "data": digest.hexdigest(),
            "device": device_type, "warm": [cfg.warm_harnesses, cfg.warm_steps, cfg.warm_batch, cfg.warm_lr,
                                            cfg.max_new_tokens, cfg.warm_tasks, cfg.warm_other_tasks]}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def warm_start(cfg, seed: int, harnesses: list, tasks: list, device, others: list = (),
               progress=None) -> tuple[dict, str]:
    """The warm-start state_dict for this seed (cached) and its cache key.

    harnesses: the demonstrated subset; tasks: the demonstrated tasks (`warm_tasks`);
    others: harnesses demonstrated on the first `cfg.warm_other_tasks` tasks only;
    progress(done, total): warm-start steps, only when the model is trained (not cached).
    """
    if getattr(cfg, "warm_counts", ""):
        counts = [int(n) for n in comma_items(cfg.warm_counts)]
        rows = [row for h, n in zip([*harnesses, *others], counts) if n
                for row in demonstration_rows([h], tasks[:n], cfg.max_len, cfg.max_new_tokens)]
    else:
        rows = demonstration_rows(harnesses, tasks, cfg.max_len, cfg.max_new_tokens)
    if others and cfg.warm_other_tasks and not getattr(cfg, "warm_counts", ""):
        rows += demonstration_rows(list(others), tasks[:cfg.warm_other_tasks], cfg.max_len, cfg.max_new_tokens)
    key = warm_key(cfg, seed, rows, torch.device(device).type)
    root = cache_root(cfg.cache_dir)
    path = root / f"warm-{key}.pt"
    with open(root / f"warm-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.exists():
                return torch.load(path, map_location="cpu", weights_only=True), key
            state = train_warm(cfg, seed, rows, device, progress)
            atomic_write(path, lambda tmp: torch.save(state, tmp))
            return state, key
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
