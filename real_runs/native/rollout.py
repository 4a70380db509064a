"""Batched multi-turn rollouts: the harnesses' control loops around KV-cached sampling.

`play` runs many episodes (any mix of harnesses and tasks) turn by turn: every episode
that is still running contributes its current context to one batched `sample` call; each
reply is fed back through the harness (parse, tool execution, observation) and the
checker scores the final state. A parse failure is the harness's business (a failed
call, never an exception here).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from real_runs.world.worlds import episode
from real_runs.native.model import ByteTokenizer, sample
from real_runs.native.trainer import Turn


@dataclass
class Played:
    """Results of `play`, index-aligned with its inputs.

    rewards: per episode; turns: per episode, its model calls; tokens: generated tokens;
    seconds: {"rollout": sampling, "tools": harness parsing, tools and checker}.
    """

    rewards: list[float]
    turns: list[list[Turn]]
    tokens: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "tools": 0.0})


def play(model, jobs: list[tuple[object, object]], *, generator: torch.Generator, max_new: int,
         temperature: float = 1.0, chunk: int = 512, sampler: str = "multinomial") -> Played:
    """Run one episode per (harness, task) job to the end and score it.

    model: a `Transformer` (or a wrapper with the same `sample` contract and its own
    `tokenizer`); at most `chunk` episodes share one sampling batch. Deterministic given
    the generator's state. sampler: how a token is drawn (`model.draw`).
    """
    tok = getattr(model, "tokenizer", None) or ByteTokenizer()
    limit = model.cfg.max_len - max_new
    t0 = time.perf_counter()
    episodes = [episode(h, task) for h, task in jobs]
    stops = [tok.stop_id(h.stop) for h, _ in jobs]
    turns: list[list[Turn]] = [[] for _ in jobs]
    out = Played(rewards=[0.0] * len(jobs), turns=turns)
    out.seconds["tools"] += time.perf_counter() - t0
    max_turns = max((h.max_turns for h, _ in jobs), default=0)
    for turn in range(max_turns):
        t0 = time.perf_counter()
        active = [i for i, (h, _) in enumerate(jobs) if not episodes[i].done and turn < h.max_turns]
        # the last `limit` tokens of each context (the system prompt is lost first on overflow)
        prompts = [tok.encode(episodes[i].context())[-limit:] for i in active]
        out.seconds["tools"] += time.perf_counter() - t0
        for lo in range(0, len(active), chunk):
            idx = active[lo:lo + chunk]
            t0 = time.perf_counter()
            comps, lps = sample(model, prompts[lo:lo + chunk], [stops[i] for i in idx], max_new,
                                generator, temperature, sampler=sampler)
            out.seconds["rollout"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            for j, i in enumerate(idx):
                turns[i].append(Turn(prompts[lo + j], comps[j], lps[j]))
                out.tokens += len(comps[j])
                episodes[i].feed(tok.decode(comps[j]))
            out.seconds["tools"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    out.rewards = [float(ep.reward()) for ep in episodes]
    out.seconds["tools"] += time.perf_counter() - t0
    return out
