"""Warm start: the loss covers exactly the completion bytes, the learning-rate schedule,
the demonstrated task set (training tasks first, never a held-out instance)."""
import math

import torch

from real_runs.world.harnesses import HARNESSES
from real_runs.native.model import ByteTokenizer, ModelConfig, Transformer
from real_runs.native.presets import resolve
from real_runs.world.tasks import make_tasks
from real_runs.native.warmstart import completion_mask, demonstration_rows, lr_at, sft_loss, warm_tasks


def test_loss_mask_covers_exactly_the_completion_bytes():
    train, _ = make_tasks(0, n_train=12, n_heldout=0)
    task = next(t for t in train if t.category == "lookup")  # read, observation, answer
    h = HARNESSES["json"]
    (tokens, spans), = demonstration_rows([h], [task], 512, 72)
    mask = completion_mask([(tokens, spans)], len(tokens) - 1)[0]
    scored = bytes(tokens[t + 1] for t in range(len(tokens) - 1) if mask[t])  # entry t scores token t+1
    assert ByteTokenizer().decode(scored) == "".join(h.demonstration(task))
    obs = ByteTokenizer().encode('{"ok":true')
    first_obs = bytes(tokens).index(bytes(obs))
    assert not mask[first_obs - 1:first_obs - 1 + len(obs)].any()


def test_sft_loss_equals_cross_entropy_of_completion_tokens_only():
    train, _ = make_tasks(0, n_train=6, n_heldout=0)
    rows = demonstration_rows([HARNESSES["xml"]], train[:3], 512, 72)
    model = Transformer(ModelConfig(n_layer=1, d_model=16, n_head=2, d_mlp=32, max_len=512),
                        torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = float(sft_loss(model, rows, "cpu"))
        want, n = 0.0, 0
        for tokens, spans in rows:
            t = torch.tensor([tokens])
            logp = torch.log_softmax(model(t, torch.arange(len(tokens))[None], None)[0], -1)
            for s, k in spans:
                want -= float(logp[torch.arange(s, s + k), t[0, s + 1:s + 1 + k]].sum())
                n += k
    assert math.isclose(loss, want / n, rel_tol=1e-5)


def test_lr_schedule_warms_up_then_decays_by_cosine_to_a_tenth():
    cfg = resolve("tiny", warm_steps=100, warm_lr=1e-2)
    assert math.isclose(lr_at(cfg, 0), 2e-3) and math.isclose(lr_at(cfg, 4), 1e-2)
    assert math.isclose(lr_at(cfg, 5), 1e-2)
    assert math.isclose(lr_at(cfg, 99), 1e-2 * (0.1 + 0.45 * (1 + math.cos(math.pi * 94 / 95))))


def test_warm_tasks_start_with_training_tasks_and_skip_heldout_instances():
    train, held = make_tasks(0, n_train=30, n_heldout=10)
    assert warm_tasks(resolve("tiny"), 0, train, held) == train
    more = warm_tasks(resolve("tiny", warm_tasks=200), 0, train, held)
    assert more[:30] == train and 150 < len(more) <= 200
    assert not {t.signature() for t in more} & {t.signature() for t in held}


def test_other_harnesses_are_demonstrated_on_the_first_k_tasks_only(tmp_path):
    from real_runs.native.warmstart import warm_start
    train, _ = make_tasks(0, n_train=8, n_heldout=0)
    base = dict(n_layer=1, d_model=16, n_head=2, d_mlp=32, warm_steps=1, warm_batch=2, cache_dir=str(tmp_path))
    sub, other = [HARNESSES["xml"]], [HARNESSES["kv"]]
    _, k0 = warm_start(resolve("tiny", **base), 0, sub, train, "cpu", other)
    _, k2 = warm_start(resolve("tiny", warm_other_tasks=2, **base), 0, sub, train, "cpu", other)
    _, k2b = warm_start(resolve("tiny", warm_other_tasks=2, **base), 0, sub, train, "cpu", other)
    assert k0 != k2 == k2b and len(list(tmp_path.glob("warm-*.pt"))) == 2   # second call: cached
    rows = demonstration_rows(other, train[:2], 512, 72)
    assert len(rows) == 2 and b"tool=" in bytes(rows[0][0])


def test_warm_counts_demonstrate_each_harness_on_its_own_number_of_tasks(tmp_path, monkeypatch):
    import real_runs.native.warmstart as ws
    train, _ = make_tasks(0, n_train=8, n_heldout=0)
    names = ["json", "xml", "func", "shell", "sexp", "kv"]
    seen = {}
    real_rows = ws.demonstration_rows
    monkeypatch.setattr(ws, "demonstration_rows",
                        lambda hs, tasks, *a: (seen.setdefault(hs[0].name, len(tasks)), real_rows(hs, tasks, *a))[1])
    base = dict(n_layer=1, d_model=16, n_head=2, d_mlp=32, warm_steps=1, warm_batch=2, cache_dir=str(tmp_path))
    cfg = resolve("tiny", warm_counts="3,0,2,2,1,5", **base)
    _, key = ws.warm_start(cfg, 0, [HARNESSES[n] for n in names[:3]], train, "cpu", [HARNESSES[n] for n in names[3:]])
    assert seen == {"json": 3, "func": 2, "shell": 2, "sexp": 1, "kv": 5}      # xml: 0 tasks, never asked
    _, other = ws.warm_start(resolve("tiny", warm_counts="3,0,2,2,1,4", **base), 0,
                             [HARNESSES[n] for n in names[:3]], train, "cpu", [HARNESSES[n] for n in names[3:]])
    assert other != key                                  # other demonstrations: another cache entry
