"""The byte transformer: KV-cached batched sampling agrees with teacher forcing, stops
per row, is deterministic in its generator; the optional HF wrapper (skipped without
transformers)."""
import importlib.util

import pytest
import torch

from real_runs.native.model import (ByteTokenizer, ModelConfig, Transformer, attention_mask, draw, right_pad, sample,
                                    token_logprobs)


@pytest.fixture(scope="module")
def model():
    return Transformer(ModelConfig(n_layer=2, d_model=32, n_head=4, d_mlp=64, max_len=96),
                       torch.Generator().manual_seed(0))


def test_tokenizer_round_trip_and_stop():
    tok = ByteTokenizer()
    assert tok.encode("a\n") == [97, 10] and tok.decode([104, 105]) == "hi"
    junk = [0xFF, 0xC3, 65, 0xE2, 0x82]          # invalid UTF-8 survives the round trip
    assert tok.encode(tok.decode(junk)) == junk and tok.encode("é") == [0xC3, 0xA9]
    assert tok.stop_id("\n") == 10 and tok.stop_id("</call>") == ord(">")
    with pytest.raises(ValueError, match="stop=''"):
        tok.stop_id("")


def test_attention_mask_is_causal_over_real_keys():
    valid = torch.tensor([[False, True, True]])
    m = attention_mask(valid, 3)[0, 0]
    assert m.tolist() == [[True, False, False], [False, True, False], [False, True, True]]
    step = attention_mask(torch.tensor([[False, True, True, True]]), 1, start=3)[0, 0]
    assert step.tolist() == [[False, True, True, True]]


def test_kv_cached_sampling_matches_teacher_forcing_and_stops(model):
    tok = ByteTokenizer()
    prompts = [tok.encode("hello"), tok.encode("a much longer prompt, left-padded"), tok.encode("x")]
    stops = [ord("e"), 300, ord(" ")]   # 300: never sampled -> runs to max_new
    comps, lps = sample(model, prompts, stops, 20, torch.Generator().manual_seed(1))
    assert len(comps[1]) == 20
    for c, s in zip(comps, stops):
        assert s not in c[:-1] and (len(c) == 20 or c[-1] == s)
    tokens, valid = right_pad([p + c for p, c in zip(prompts, comps)], "cpu")
    with torch.no_grad():
        lp = token_logprobs(model, tokens, valid)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        assert torch.allclose(lp[i, len(p) - 1:len(p) - 1 + len(c)], torch.tensor(lps[i]), atol=1e-5)
    with torch.no_grad():                       # scoring from column 4 on: the same there, 0 before
        part = token_logprobs(model, tokens, valid, keep_from=4)
    assert part.shape == lp.shape and not part[:, :4].any()
    assert torch.allclose(part[:, 4:], lp[:, 4:], atol=1e-6)
    again = sample(model, prompts, stops, 20, torch.Generator().manual_seed(1))
    assert again == (comps, lps)
    other = sample(model, prompts, stops, 20, torch.Generator().manual_seed(2))
    assert other[0] != comps


@pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="transformers (extra 'hf') not installed")
def test_hf_wrapper_samples_and_scores_like_the_builtin(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
    from tokenizers import Tokenizer, models, pre_tokenizers

    from real_runs.native.hf import load_hf_model
    from real_runs.native.sketch import block_parameters

    torch.manual_seed(0)  # test-only: the HF constructor initialises from the global RNG
    GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=300, n_positions=128)).save_pretrained(tmp_path)
    vocab = {chr(i): i for i in range(32, 127)} | {"\n": 10, "[UNK]": 0}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="[UNK]").save_pretrained(tmp_path)
    m = load_hf_model(str(tmp_path), "transformer.h", "cpu", max_len=128)
    assert len(block_parameters(m, m.block_path, 2)) > 0
    prompts = [m.tokenizer.encode("ab c"), m.tokenizer.encode("hello"), m.tokenizer.encode("ab c")]
    comps, lps = sample(m, prompts, [m.tokenizer.stop_id("\n")] * 3, 6, torch.Generator().manual_seed(0))
    tokens, valid = right_pad([p + c for p, c in zip(prompts, comps)], "cpu")
    with torch.no_grad():
        lp = token_logprobs(m, tokens, valid)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        assert torch.allclose(lp[i, len(p) - 1:len(p) - 1 + len(c)], torch.tensor(lps[i]), atol=1e-4)
    with torch.no_grad():                       # transformers' logits_to_keep: the last T - 3 columns
        part = token_logprobs(m, tokens, valid, keep_from=3)
    assert part.shape == lp.shape and not part[:, :3].any()
    assert torch.allclose(part[:, 3:], lp[:, 3:], atol=1e-5)


def test_a_shared_prompt_is_prefilled_once_and_its_rows_sample_apart(model, monkeypatch):
    """Rows with the same prompt (a group's G rollouts) share one prefill: the model sees the
    distinct prompts only, each row then samples on its own, scored as teacher forcing scores it."""
    tok = ByteTokenizer()
    prompts = [tok.encode("same prompt"), tok.encode("other"), tok.encode("same prompt"), tok.encode("same prompt")]
    widths = []
    forward = Transformer.forward

    def spy(self, tokens, *args, **kwargs):
        widths.append(tuple(tokens.shape))
        return forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(Transformer, "forward", spy)
    comps, lps = sample(model, prompts, [300] * 4, 12, torch.Generator().manual_seed(5))
    monkeypatch.undo()
    assert widths[0] == (2, len(prompts[0])) and all(w == (4, 1) for w in widths[1:])
    assert len({tuple(c) for c in (comps[0], comps[2], comps[3])}) > 1     # the shared rows sample apart
    tokens, valid = right_pad([p + c for p, c in zip(prompts, comps)], "cpu")
    with torch.no_grad():
        lp = token_logprobs(model, tokens, valid)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        assert torch.allclose(lp[i, len(p) - 1:len(p) - 1 + len(c)], torch.tensor(lps[i]), atol=1e-5)


def test_finished_rows_leave_the_batch_and_the_sample_stays(model, monkeypatch):
    """Once at most `compact` of the running rows are unfinished, the finished ones leave the
    forward (their cache rows dropped): the tokens drawn are those of the full batch, since
    every row still draws from the generator at every step."""
    tok = ByteTokenizer()
    prompts = [tok.encode(t) for t in ("one", "two words", "three", "four and more")]
    free, _ = sample(model, prompts, [300] * 4, 12, torch.Generator().manual_seed(3))
    stops = [free[0][1], free[1][3], 300, 300]           # rows 0 and 1 stop early, rows 2 and 3 run to 12
    got, widths = {}, {}
    forward = Transformer.forward
    for compact in (0.0, 0.75, 1.0):
        seen = widths.setdefault(compact, [])

        def spy(self, tokens, *args, **kwargs):
            seen.append(tokens.shape[0])
            return forward(self, tokens, *args, **kwargs)

        monkeypatch.setattr(Transformer, "forward", spy)
        got[compact] = sample(model, prompts, stops, 12, torch.Generator().manual_seed(3), compact=compact)
        monkeypatch.undo()
    comps, lps = got[0.0]
    assert [len(c) for c in comps][2:] == [12, 12] and len(comps[0]) <= 2 and len(comps[1]) <= 4
    assert comps[2:] == free[2:]                        # the stream does not depend on who stopped
    assert set(widths[0.0]) == {4}                      # never compacted: every step runs 4 rows
    assert widths[1.0][-1] == 2 and min(widths[0.75]) == 2 and widths[0.75] != widths[0.0]
    for compact in (0.75, 1.0):
        assert got[compact][0] == comps
        assert all(torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6) for a, b in zip(got[compact][1], lps))


def test_inverse_cdf_draws_the_first_token_whose_cumulative_mass_exceeds_u(monkeypatch):
    """Hand case: rows that do not sum to 1, zeros inside and at the end; the uniforms are
    those the same generator gives (one float64 per row), and each token is read off the
    cumulative sums by hand; u = 0 (torch.rand's lowest value) draws each row's first token
    with mass, never a leading zero."""
    probs = torch.tensor([[0.0, 0.4, 0.0, 1.0, 0.6, 0.0],      # total 2.0: cum 0, .4, .4, 1.4, 2.0, 2.0
                          [0.25, 0.25, 0.25, 0.25, 0.0, 0.0],
                          [0.0, 0.0, 0.0, 0.0, 0.0, 3.0]])
    u = torch.rand(3, 1, generator=torch.Generator().manual_seed(5), dtype=torch.float64).squeeze(1).tolist()
    cums = [[0.0, 0.4, 0.4, 1.4, 2.0, 2.0], [0.25, 0.5, 0.75, 1.0, 1.0, 1.0], [0, 0, 0, 0, 0, 3.0]]
    want = [next(i for i, c in enumerate(cum) if c > x * cum[-1]) for x, cum in zip(u, cums)]
    got = draw(probs, torch.Generator().manual_seed(5), "inverse_cdf").tolist()
    assert got == want and got[2] == 5
    monkeypatch.setattr(torch, "rand", lambda n, _, **kw: torch.zeros(n, 1, dtype=torch.float64))
    assert draw(probs, torch.Generator(), "inverse_cdf").tolist() == [1, 0, 5]
    monkeypatch.undo()
    with pytest.raises(ValueError, match="sums to 0"):
        draw(torch.zeros(1, 4), torch.Generator(), "inverse_cdf")


def test_inverse_cdf_has_the_rows_distribution_and_never_a_zero_token():
    """200,000 draws of one row given as 3 x its probabilities: each token's share within
    0.004 (3.6 standard errors at p = 0.5) of its probability, and no token of probability 0
    (inside or at the end)."""
    row = torch.tensor([0.0, 0.2, 0.0, 0.5, 0.3, 0.0])
    got = draw(3 * row.repeat(200_000, 1), torch.Generator().manual_seed(1), "inverse_cdf")
    share = torch.bincount(got, minlength=6).double() / got.numel()
    assert share[[0, 2, 5]].sum() == 0
    assert torch.allclose(share, row.double(), atol=0.004), share


def test_the_sampler_knob_changes_the_draws_and_keeps_the_models_log_probs(model):
    """`sample(..., sampler=...)`: each sampler is deterministic given the generator, the two
    draw differently, and the log-probs are the model's for the tokens drawn (teacher forcing)."""
    tok = ByteTokenizer()
    prompts = [tok.encode(t) for t in ("one", "two words", "three")]
    runs = {s: sample(model, prompts, [300] * 3, 10, torch.Generator().manual_seed(2), sampler=s)
            for s in ("multinomial", "inverse_cdf")}
    again = sample(model, prompts, [300] * 3, 10, torch.Generator().manual_seed(2), sampler="inverse_cdf")
    assert again == runs["inverse_cdf"] and runs["inverse_cdf"][0] != runs["multinomial"][0]
    comps, lps = runs["inverse_cdf"]
    tokens, valid = right_pad([p + c for p, c in zip(prompts, comps)], "cpu")
    with torch.no_grad():
        forced = token_logprobs(model, tokens, valid)
    for i, (p, c) in enumerate(zip(prompts, comps)):
        assert torch.allclose(forced[i, len(p) - 1:len(p) - 1 + len(c)], torch.tensor(lps[i]), atol=1e-5)
    with pytest.raises(ValueError, match="expected one of multinomial, inverse_cdf"):
        draw(torch.ones(1, 3), torch.Generator(), "gumbel")
