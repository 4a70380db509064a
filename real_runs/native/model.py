"""The built-in policy model: a byte-level tokenizer and a small decoder-only transformer
with named blocks and KV-cached batched sampling.

Shapes: B = batch rows, T = sequence length, C = width, H = heads, D = C // H.
Prompts are LEFT-padded for sampling and rows are RIGHT-padded for training; in both
cases a token's position is the number of real tokens before it, so teacher-forced
log-probs equal the sampling log-probs up to float rounding.

Each position's input is the embedding of its byte plus a learned embedding of the
PREVIOUS byte (a token shift, as in RWKV and "smeared keys"; zero at a row's first
token). With it one attention layer can match "the byte after an earlier copy of my
byte" (an induction head), so the small models learn to copy file names and contents
from their context in a few hundred supervised steps instead of thousands. The cache
keeps each row's last token so that KV-cached decoding sees the same inputs.

Parameter names are stable and readable (``blocks.3.attn.q.weight``,
``blocks.3.mlp.down.weight``), so the gradient sketch can address "the last 4 blocks".
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from policies.errors import UserError
from real_runs.native.presets import SAMPLERS

VOCAB = 256  # one token per byte


class ByteTokenizer:
    """UTF-8 bytes <-> token ids 0..255, lossless both ways: invalid byte sequences decode
    to lone surrogates (surrogateescape) and encode back to the same bytes, so a reply fed
    to a harness reappears byte for byte in the next context."""

    vocab_size = VOCAB

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8", errors="surrogateescape"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", errors="surrogateescape")

    def stop_id(self, stop: str) -> int:
        """The token that ends a completion: the last byte of the harness's stop string."""
        data = stop.encode("utf-8")
        if not data:
            raise UserError(f"harness stop={stop!r} is not allowed: expected a non-empty string")
        return data[-1]


@dataclass(frozen=True)
class ModelConfig:
    """The model's shape (validated where it is configured: `native.presets.REAL_KNOBS`)."""

    n_layer: int = 2
    d_model: int = 64
    n_head: int = 4
    d_mlp: int = 256
    max_len: int = 512


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)

    def forward(self, x, mask, cache=None, start=0):
        """x: (B, T, C); mask: (B, 1, T, start+T) bool, or None for plain causal attention
        (right-padded training rows: fused kernels); cache: (k, v) each (B, H, Tmax, D)."""
        B, T, C = x.shape
        shape = (B, T, self.n_head, C // self.n_head)
        q = self.q(x).view(shape).transpose(1, 2)  # (B, H, T, D)
        k = self.k(x).view(shape).transpose(1, 2)
        v = self.v(x).view(shape).transpose(1, 2)
        if cache is not None:
            cache[0][:, :, start:start + T] = k
            cache[1][:, :, start:start + T] = v
            k, v = cache[0][:, :, :start + T], cache[1][:, :, :start + T]
        if mask is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_mlp, bias=False)
        self.gate = nn.Linear(cfg.d_model, cfg.d_mlp, bias=False)
        self.down = nn.Linear(cfg.d_mlp, cfg.d_model, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.norm1 = nn.RMSNorm(cfg.d_model)
        self.attn = Attention(cfg)
        self.norm2 = nn.RMSNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x, mask, cache=None, start=0):
        x = x + self.attn(self.norm1(x), mask, cache, start)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """Decoder-only transformer over bytes. `blocks` is the path of the transformer blocks."""

    block_path = "blocks"
    causal_ok = True  # key_valid=None -> fused causal attention for right-padded rows

    def __init__(self, cfg: ModelConfig, generator: torch.Generator | None = None):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Embedding(VOCAB, cfg.d_model)
        self.prev_emb = nn.Embedding(VOCAB, cfg.d_model)  # the previous byte (token shift)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.norm_f = nn.RMSNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, VOCAB, bias=False)
        self.reset_parameters(generator)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None) -> None:
        """GPT-2 style init from an explicit generator (no global RNG); residual outputs scaled."""
        for name, p in self.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0)
                continue
            std = 0.02
            if name.endswith(("attn.o.weight", "mlp.down.weight")):
                std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
            p.copy_(torch.randn(p.shape, generator=generator) * std)

    def forward(self, tokens, positions, key_valid, cache=None, start=0, keep_last=0):
        """tokens, positions: (B, T) long; key_valid: (B, start+T) bool, False at padding,
        or None when every key before a query is real (right padding, no cache);
        cache: from `new_cache`, filled at [start, start+T) -> logits (B, T, V) float32;
        keep_last = N > 0: the logits of the last N positions only, (B, N, V)."""
        x = self.hidden(tokens, positions, key_valid, cache, start)
        return self.lm_head(x[:, -keep_last:] if keep_last else x).float()

    def hidden(self, tokens, positions, key_valid, cache=None, start=0):
        """The final normalised hidden states (B, T, C) of `forward` (before `lm_head`)."""
        if key_valid is None and (cache is not None or start):
            raise ValueError("key_valid=None is only allowed without a cache")
        mask = None if key_valid is None else attention_mask(key_valid, tokens.shape[1], start)
        last = tokens.new_zeros(tokens.shape[0], 1) if cache is None else cache[-1]  # (B, 1)
        prev = torch.cat([last, tokens[:, :-1]], dim=1)  # (B, T): the byte before each position
        if cache is not None:
            cache[-1] = tokens[:, -1:].clone()
        shift = self.prev_emb(prev) * (positions > 0).unsqueeze(-1).to(self.prev_emb.weight.dtype)
        x = self.tok_emb(tokens) + shift + self.pos_emb(positions.clamp(0, self.cfg.max_len - 1))  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache[i], start)
        return self.norm_f(x)

    def new_cache(self, batch: int, length: int):
        """Per-block (k, v) buffers, each (B, H, length, D), then each row's last token (B, 1)."""
        p = self.tok_emb.weight
        shape = (batch, self.cfg.n_head, length, self.cfg.d_model // self.cfg.n_head)
        return [(p.new_zeros(shape), p.new_zeros(shape)) for _ in self.blocks] + \
            [torch.zeros(batch, 1, dtype=torch.long, device=p.device)]

    @staticmethod
    def select_cache(cache, index: torch.Tensor):
        """The cache of the rows `index` (B',) long, a row repeated as often as it is named."""
        return [(k[index], v[index]) for k, v in cache[:-1]] + [cache[-1][index]]


def attention_mask(key_valid: torch.Tensor, T: int, start: int = 0) -> torch.Tensor:
    """key_valid: (B, S) bool with S = start + T -> (B, 1, T, S) bool: query i (absolute
    position start+i) sees key j iff j <= start+i and key j is real; every query sees
    itself, so padded rows stay finite."""
    S = key_valid.shape[1]
    q = torch.arange(start, start + T, device=key_valid.device)[:, None]  # (T, 1)
    k = torch.arange(S, device=key_valid.device)[None, :]  # (1, S)
    return (((k <= q)[None] & key_valid[:, None, :]) | (k == q)[None])[:, None]


def right_pad(rows: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Token rows -> (tokens (B, T) long, valid (B, T) bool), padded on the right with 0."""
    T = max(len(r) for r in rows)
    tokens = torch.zeros(len(rows), T, dtype=torch.long)
    valid = torch.zeros(len(rows), T, dtype=torch.bool)
    for i, r in enumerate(rows):
        tokens[i, :len(r)] = torch.tensor(r, dtype=torch.long)
        valid[i, :len(r)] = True
    return tokens.to(device), valid.to(device)


def token_logprobs(model: Transformer, tokens: torch.Tensor, valid: torch.Tensor, keep_from: int = 0) -> torch.Tensor:
    """Teacher-forced log p(tokens[:, t+1] | tokens[:, :t+1]) for right-padded rows.

    tokens, valid: (B, T) -> (B, T-1) float32 (entry t scores token t+1). Padding sits
    after every real token, so plain causal attention is exact for real positions.
    keep_from = k > 0: only entries t >= k are scored (the vocabulary projection and its
    softmax skip the prompt); entries before k are 0.
    """
    T = tokens.shape[1]
    keep_from = min(max(int(keep_from), 0), T - 1)
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)
    key_valid = None if getattr(model, "causal_ok", False) else valid
    logits = model(tokens, positions, key_valid, keep_last=T - keep_from)     # (B, T - keep_from, V)
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, tokens[:, keep_from + 1:, None]).squeeze(-1)
    return logp if keep_from == 0 else torch.cat([logp.new_zeros(tokens.shape[0], keep_from), logp], dim=1)


#: the shortest common prefix of a batch's prompts that `prefill` runs once on its own
MIN_SHARED_PREFIX = 8


def common_prefix(prompts: list[tuple[int, ...]]) -> int:
    """Length of the tokens every prompt starts with, leaving each at least its last token."""
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for other in prompts[1:]:
        k = 0
        while k < n and other[k] == first[k]:
            k += 1
        n = k
    return max(n, 0)


def prefill(model, prompts: list[tuple[int, ...]], extra: int):
    """The KV-cached prefill of distinct prompts, only each one's last position projected onto
    the vocabulary: (logits (U, V), cache with room for `extra` more positions, key mask (U, P)).

    A model that reads keys by position alone (`middle_padding_ok`, e.g. a Hugging Face model;
    not the built-in one, whose token shift reads the previous column) runs the prompts'
    common prefix once when it is at least MIN_SHARED_PREFIX tokens (a harness's system
    prompt for all its tasks), then each prompt's rest on that cache, the padding between the
    two: row layout [prefix][padding][rest]. Otherwise each prompt is left-padded.
    """
    device = next(model.parameters()).device
    c = common_prefix(prompts) if len(prompts) > 1 and getattr(model, "middle_padding_ok", False) else 0
    c = c if c >= MIN_SHARED_PREFIX else 0
    rest = [p[c:] for p in prompts]
    R = max(len(r) for r in rest)
    tokens = torch.zeros(len(prompts), R, dtype=torch.long)
    valid = torch.zeros(len(prompts), c + R, dtype=torch.bool)
    valid[:, :c] = True
    for u, r in enumerate(rest):
        tokens[u, R - len(r):] = torch.tensor(r, dtype=torch.long)
        valid[u, c + R - len(r):] = True
    tokens, valid = tokens.to(device), valid.to(device)
    cache = model.new_cache(1 if c else len(prompts), c + R + extra)
    if c:
        head = torch.tensor([prompts[0][:c]], dtype=torch.long, device=device)
        model(head, torch.arange(c, device=device)[None], valid[:1, :c], cache, 0, keep_last=1)
        cache = model.select_cache(cache, torch.zeros(len(prompts), dtype=torch.long, device=device))
    positions = (valid.long().cumsum(1) - 1).clamp(min=0)[:, c:]
    return model(tokens, positions, valid, cache, c, keep_last=1)[:, -1], cache, valid


def draw(probs: torch.Tensor, generator: torch.Generator, sampler: str = "multinomial") -> torch.Tensor:
    """One token per row of `probs` (B, V), each with its row's probability (the rows need
    not sum to 1), as (B,) long.

    multinomial: `torch.multinomial` (an exponential race: V random numbers per row; 16 ms
    for 16 rows of SmolLM2's 49,152 tokens on one CPU thread). inverse_cdf: one uniform u per
    row and the first token whose cumulative probability (float64) exceeds u times the row's
    total (6 ms): the same distribution, other draws; a token of probability 0 is never
    drawn. Both take the same number of draws from `generator` whatever the probabilities."""
    if sampler == "multinomial":
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)
    if sampler != "inverse_cdf":
        raise ValueError(f"sampler={sampler!r}: expected one of {', '.join(SAMPLERS)}")
    cum = probs.double().cumsum(-1)
    total = cum[:, -1:]
    if not bool(((total > 0) & torch.isfinite(total)).all()):
        raise ValueError("draw: a row of probabilities sums to 0, inf or nan")
    u = torch.rand(probs.shape[0], 1, generator=generator, dtype=torch.float64, device=probs.device)
    # u < 1, so u x total < total = cum[-1] and the token is a real one; a token of probability 0
    # has an empty interval [cum before it, its cum) and is never the first cum above u x total
    return torch.searchsorted(cum, u * total, right=True).squeeze(1)


@torch.no_grad()
def sample(model: Transformer, prompts: list[list[int]], stop_ids: list[int], max_new: int,
           generator: torch.Generator, temperature: float = 1.0, compact: float = 0.75,
           sampler: str = "multinomial"):
    """KV-cached batched sampling.

    prompts: B token lists (each shorter than model max_len - max_new; callers truncate).
    stop_ids: per-row token that ends a completion (kept in the completion).
    compact: once the unfinished rows are at most this share of the rows the model still
    runs, the finished ones leave the batch (their cache rows dropped; 0 = never). Every row
    still draws from the generator at every step (a finished row's draw is discarded), so
    the random stream, and with it the sample, does not depend on it.
    sampler: how a token is drawn (`draw`).
    Returns (completions: list of B token lists, logprobs: list of B float lists) where
    logprobs are the policy's log-probs of the sampled tokens (temperature 1 scale).
    """
    device = next(model.parameters()).device
    B = len(prompts)
    unique: dict[tuple[int, ...], int] = {}
    row_of = [unique.setdefault(tuple(p), len(unique)) for p in prompts]   # a group's G rows share one prompt
    index = torch.tensor(row_of, dtype=torch.long, device=device)
    logits, cache, head = prefill(model, list(unique), max_new)            # (U, V), cache, (U, P)
    P = head.shape[1]
    if len(unique) < B:
        cache = model.select_cache(cache, index)
    valid = torch.zeros(B, P + max_new, dtype=torch.bool, device=device)
    valid[:, :P] = head[index]
    logits = logits[index]                                                 # (B, V)
    stop = torch.tensor(stop_ids, dtype=torch.long, device=device)
    pos = valid.long().sum(1) - 1                                          # each row's last prompt position
    done = torch.zeros(B, dtype=torch.bool, device=device)
    running = torch.arange(B, device=device)     # the rows the model still runs, in cache order
    out_tok, out_lp, alive = [], [], []
    for t in range(max_new):
        logp = torch.log_softmax(logits, dim=-1)  # (B, V)
        probs = torch.softmax(logits / temperature, dim=-1) if temperature != 1.0 else logp.exp()
        nxt = draw(probs, generator, sampler)                              # (B,)
        out_tok.append(nxt)
        out_lp.append(logp.gather(1, nxt[:, None]).squeeze(1))
        alive.append(~done)
        done = done | (nxt == stop)
        if t == max_new - 1 or bool(done.all()):
            break
        valid[:, P + t] = True
        pos = pos + 1
        live = torch.nonzero(~done).squeeze(1)
        if len(live) <= compact * len(running):
            cache = model.select_cache(cache, torch.searchsorted(running, live))
            running = live
        # a finished row keeps its last logits: its draws are discarded
        logits[running] = model(nxt[running, None], pos[running, None], valid[running, :P + t + 1], cache,
                                P + t)[:, -1]
    toks = torch.stack(out_tok, 1).cpu()
    lps = torch.stack(out_lp, 1).float().cpu()
    keep = torch.stack(alive, 1).cpu()
    lengths = keep.sum(1).tolist()
    return ([toks[i, :n].tolist() for i, n in enumerate(lengths)],
            [lps[i, :n].tolist() for i, n in enumerate(lengths)])
