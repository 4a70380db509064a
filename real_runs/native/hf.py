"""Optional: a local Hugging Face causal LM as the policy (`--model PATH`, extra `hf`).

`load_hf_model(path, block_path, device, max_len)` wraps `AutoModelForCausalLM` so that it
speaks the built-in model's contract and goes through the same trainer, sampler and
sketch: `forward(tokens, positions, key_valid, cache, start) -> logits`, `new_cache`,
`cfg.max_len`, `block_path` (the configured path of the decoder blocks, e.g.
"model.layers" for Llama/Qwen, "transformer.h" for GPT-2, prefixed with "hf.") and a
`tokenizer` with `encode / decode / stop_id`. No download ever happens
(`local_files_only=True`); no warm start is applied (the checkpoint is the base model).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from policies.errors import UserError, require_extra


@dataclass(frozen=True)
class HFConfig:
    max_len: int


class HFTokenizer:
    """encode/decode/stop_id over a Hugging Face tokenizer (no special tokens added)."""

    def __init__(self, tok):
        self.tok = tok

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids) -> str:
        return self.tok.decode(list(ids), skip_special_tokens=False)

    def stop_id(self, stop: str) -> int:
        ids = self.encode(stop)
        if not ids:
            raise UserError(f"harness stop={stop!r} encodes to no token with this tokenizer")
        return ids[-1]


class HFCausalLM(nn.Module):
    """A Hugging Face causal LM behind the built-in `Transformer`'s interface."""

    middle_padding_ok = True    # keys are read by position and mask alone (`model.prefill`)

    def __init__(self, hf_model, tokenizer, block_path: str, max_len: int):
        super().__init__()
        self.hf = hf_model
        self.tokenizer = HFTokenizer(tokenizer)
        self.block_path = f"hf.{block_path}"
        limit = getattr(hf_model.config, "max_position_embeddings", max_len) or max_len
        self.cfg = HFConfig(max_len=min(int(max_len), int(limit)))
        try:
            self.get_submodule(self.block_path)
        except AttributeError as exc:
            raise UserError(f"hf_block_path={block_path!r} is not a module of this model: {exc}") from None

    def forward(self, tokens, positions, key_valid, cache=None, start=0, keep_last=0):
        """Same contract as `Transformer.forward`; HF builds the causal mask from key_valid
        (keep_last: transformers' `logits_to_keep`)."""
        out = self.hf(input_ids=tokens, attention_mask=key_valid.long(), position_ids=positions,
                      past_key_values=None if cache is None else cache[0],
                      use_cache=cache is not None, logits_to_keep=keep_last)
        if cache is not None:
            cache[0] = out.past_key_values
        return out.logits.float()

    def new_cache(self, batch: int, length: int):
        from transformers import DynamicCache
        return [DynamicCache()]

    @staticmethod
    def select_cache(cache, index: torch.Tensor):
        """The cache of the rows `index` (B',) long, a row repeated as often as it is named."""
        cache[0].reorder_cache(index)
        return cache


def _unreadable() -> tuple[type, ...]:
    """What loading a folder whose config, weights or tokenizer are missing, truncated or
    not theirs raises (transformers, torch.load, safetensors)."""
    import pickle
    kinds: tuple[type, ...] = (OSError, ValueError, RuntimeError, EOFError, pickle.UnpicklingError)
    try:
        from safetensors import SafetensorError
    except ImportError:
        return kinds
    return (*kinds, SafetensorError)


def load_local(path: str, name: str = "model_path", *, unreadable: str | None = None, **tokenizer_kw):
    """(float32 model, tokenizer) of a local Hugging Face causal-LM directory; never
    downloads. `name`: the option in error messages; `unreadable`: the message (before the
    cause in parentheses) when the folder cannot be loaded (default: "NAME=PATH: not a
    loadable Hugging Face model directory"); `tokenizer_kw`: e.g. padding_side."""
    require_extra("transformers", f"{name}={path!r}", "hf")
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not Path(path).is_dir():
        raise UserError(f"{name}={path!r} is not allowed: expected a local Hugging Face model directory")
    try:
        import transformers    # 5.x names the argument `dtype` (and warns on `torch_dtype`)
        dtype = {"dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype": torch.float32}
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **dtype)
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True, **tokenizer_kw)
    except _unreadable() as exc:   # no (or an unknown or truncated) config.json, weights or tokenizer there
        cause = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"{unreadable or f'{name}={path!r}: not a loadable Hugging Face model directory'} "
                        f"({cause})") from None
    return model, tok


def load_hf_model(path: str, block_path: str, device, max_len: int = 512) -> HFCausalLM:
    return HFCausalLM(*load_local(path), block_path, max_len).to(device)
