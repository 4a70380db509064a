"""The TRL backend: a real GRPOTrainer (tiny in-process Qwen2, byte tokenizer, CPU, offline)
scheduled by the policy objects."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("trl")  # the README's set-up installs the extra; a bare install skips

from hbsim.experiment import resolve_policy  # noqa: E402
from hbsim.loop import step_overhead  # noqa: E402
from policies import Feedback, make  # noqa: E402
from policies.errors import UserError  # noqa: E402
from real_runs.integrations import trl_run  # noqa: E402
from real_runs.integrations.signals import group_signals, group_table  # noqa: E402
from real_runs.integrations.trl_grpo import harness_dataset, harness_reward  # noqa: E402
from real_runs.native.sketch import global_sketch  # noqa: E402
from real_runs.world.harnesses import get_harness  # noqa: E402
from real_runs.world.tasks import make_tasks  # noqa: E402
from state_equal import assert_state_equal

HARNESSES = ["json", "xml", "kv"]
MAXLEN = 12


class Recorder:
    """A second reward (the fraction of even token ids, so groups have reward variance) that
    records the prompts and harness column every completion was trained on."""

    def __init__(self):
        self.calls = []
        self.__name__ = "even_tokens"

    def __call__(self, prompts, completions, completion_ids, harness, task, trainer_state, **_):
        self.calls.append({"step": trainer_state.global_step, "prompts": list(prompts),
                           "harness": list(harness), "task": list(task)})
        return [sum(i % 2 == 0 for i in ids) / max(len(ids), 1) for ids in completion_ids]


def _build(tmp_path, name="run", policy="harnessbandit", steps=4, knobs=None, **kw):
    torch.set_num_threads(1)
    cfg = trl_run.TRL_KNOBS.settings(dict(harnesses=HARNESSES, n_train_tasks=12, n_heldout_tasks=2, eval_tasks=1,
                                          max_completion_length=MAXLEN, batch_groups=2, group_size=4, lr=1e-3,
                                          sketch_dim=512))
    pc = resolve_policy({"name": policy, "label": policy, **(knobs or {})}, len(HARNESSES))
    rec = Recorder()
    trainer, sched, config = trl_run.build(cfg, policy_cfg=pc, seed=0, steps=steps, out=str(tmp_path / name),
                                           extra_rewards=[rec], **kw)
    return trainer, sched, config, rec


def test_selected_harness_prompts_are_trained_and_signals_flow(tmp_path):
    trainer, sched, config, rec = _build(tmp_path, checkpoint_every=100)
    before = sched.policy.state_dict()
    seen = []
    update = sched.policy.update
    sched.policy.update = lambda fb: (seen.append(fb), update(fb))[1]
    trainer.train()
    train = sched.result(config).train
    assert list(train["step"]) == [1, 2, 3, 4]
    assert list(train["arm"]) == [0, 1, 2, 0]  # harnessbandit warm-up: round robin
    tasks = {t.id: t for t in make_tasks(0, n_train=12, n_heldout=2)[0]}
    assert len(rec.calls) == 4
    for call, arm in zip(rec.calls, train["arm"]):
        name = HARNESSES[arm]
        assert call["harness"] == [name] * 8
        assert call["prompts"] == [get_harness(name).render(tasks[t]) for t in call["task"]]
        assert call["task"][0::4] == call["task"][3::4]  # G = 4 consecutive completions per prompt
    # L: finite where defined, equal to SPEC §2.3 on the rewards; at least one step defines it
    learn = train["learnability"].to_numpy()
    assert np.isfinite(learn).sum() >= 2
    assert [fb.learnability for fb in seen] == [None if np.isnan(x) else x for x in learn]
    transfer = train["transfer"].to_numpy()
    assert np.isnan(transfer[0]) and np.isfinite(transfer[1:]).any()
    assert all(np.isfinite(x) for x in transfer if not np.isnan(x))
    for fb, row in zip(seen, train.itertuples()):
        assert fb.sketch is not None and fb.sketch.shape == (sched.sketch.dim,) and np.isfinite(fb.sketch).all()
        assert fb.update_sketch is not None and fb.update_sketch.shape == (sched.sketch.dim,)
        assert row.groups_generated == 2 and row.groups_optimized == 2
        assert row.groups_retained == round(2 * (1 - row.frac_reward_zero_std))
    after = sched.policy.state_dict()
    assert after["t"] == 4 and before["t"] == 0
    # the groups table: every generated group, its harness the step's, its mean the step's reward
    groups = sched.result(config).groups
    assert groups.groupby("step")["arm"].apply(list).tolist() == [[a, a] for a in train["arm"]]
    assert groups.groupby("step")["retained"].sum().tolist() == train["groups_retained"].tolist()
    np.testing.assert_allclose(groups.groupby("step")["reward_mean"].mean(), train["reward"], rtol=1e-12)
    assert (groups["cost"] > 0).all() and (groups["harness"] == [HARNESSES[a] for a in groups["arm"]]).all()
    assert np.isfinite(train["seconds_step"]).all() and (train["overhead_frac"] < 1).all()
    assert train["overhead_frac"].tolist() == [step_overhead(r) for r in train.to_dict("records")]


def test_sketch_is_taken_before_clipping(tmp_path):
    trainer, sched, config, rec = _build(tmp_path, steps=2, checkpoint_every=100,
                                         extra_args={"max_grad_norm": 1e-6})
    pre, post, fed = [], [], []
    clip = trainer.accelerator.clip_grad_norm_

    def spy(params, max_norm, *a, **k):
        pre.append(sched.sketch.grad().clone())
        norm = clip(params, max_norm, *a, **k)
        post.append(sched.sketch.grad().clone())
        return norm

    trainer.accelerator.clip_grad_norm_ = spy
    update = sched.policy.update
    sched.policy.update = lambda fb: (fed.append(fb.sketch), update(fb))[1]
    trainer.train()
    assert len(pre) == len(fed) == 2
    for p, q, f in zip(pre, post, fed):
        assert float(p.norm()) > 1e-3 > 100 * float(q.norm())      # clipping really acted
        np.testing.assert_array_equal(f, p.numpy())                  # the policy saw the unclipped values


def test_check_resume_refuses_another_config_or_a_later_checkpoint(tmp_path, capsys):
    cfg = trl_run.TRL_KNOBS.settings(dict(harnesses=HARNESSES, lr=1e-3))
    pc = resolve_policy({"name": "uniform", "label": "uniform"}, len(HARNESSES))

    def config(steps=4, eval_budget=None, **knobs):
        c = trl_run.TRL_KNOBS.settings({"harnesses": HARNESSES, "lr": 1e-3, **knobs})
        return trl_run.run_config(c, policy_cfg=pc, seed=0, steps=steps, eval_budget=eval_budget)
    assert config()["env"]["lr"] == 1e-3 and "eval_budget" not in config()
    assert config() == trl_run.run_config(cfg, policy_cfg=pc, seed=0, steps=4)
    folder = tmp_path / "trl" / "checkpoint-2"
    folder.mkdir(parents=True)
    torch.save({"format": 2, "config": config(steps=3)}, folder / "harnessbandit.pt")
    trl_run.check_resume(folder, config(steps=6), 6)             # only --steps changed
    trl_run.check_resume(folder, config(steps=2), 2)             # resuming at the last step: nothing left to train
    cases = [(config(steps=6, lr=0.5), 6, "(env.lr differ); only --steps may change"),
             (config(steps=6, eval_budget="groups:8"), 6, "(eval_budget differ); only --steps may change"),
             ({**config(steps=6), "seed": 1}, 6, "(seed differ)"),
             (config(steps=1), 1, "--steps=1 is not allowed: the checkpoint is already at step 2")]
    for new, steps, message in cases:
        with pytest.raises(UserError) as info:
            trl_run.check_resume(folder, new, steps)
        assert message in str(info.value), (new, str(info.value))
    torch.save({"format": 2}, folder / "harnessbandit.pt")       # an older version saved no config
    trl_run.check_resume(folder, config(steps=6, lr=0.5), 6)
    assert "has no saved config" in capsys.readouterr().err
    (folder / "harnessbandit.pt").write_bytes(b"")
    with pytest.raises(UserError, match="harnessbandit.pt cannot be read"):
        trl_run.check_resume(folder, config(), 4)


def test_resume_restores_the_scheduler_exactly(tmp_path):
    a, sa, config, _ = _build(tmp_path, "a", checkpoint_every=2)
    a.train()
    saved = torch.load(tmp_path / "a" / "trl" / "checkpoint-2" / "harnessbandit.pt", weights_only=False)
    assert saved["recorder"]["t"] == 2 and len(saved["recorder"]["rows"]) == 2
    assert saved["config"] == config        # what --resume compares (trl_run.check_resume)
    b, sb, _, _ = _build(tmp_path, "b", checkpoint_every=2)
    loaded = []
    load = sb.load_state_dict
    sb.load_state_dict = lambda s: (load(s), loaded.append(sb.state_dict()))[0]
    b.train(resume_from_checkpoint=str(tmp_path / "a" / "trl" / "checkpoint-2"))
    assert_state_equal(loaded[0]["recorder"]["policy"], saved["recorder"]["policy"])
    assert_state_equal(loaded[0]["sampler"], saved["sampler"])
    assert_state_equal(sb.policy.state_dict(), sa.policy.state_dict())   # continued bit for bit to step 4
    ta, tb = sa.result(config).train, sb.result(config).train
    cols = [c for c in ta.columns if not c.startswith(("seconds_", "overhead"))]
    assert ta[cols].equals(tb[cols])


def test_mixed_baseline_honours_the_allocation_counts(tmp_path):
    trainer, sched, config, rec = _build(tmp_path, policy="mixed", steps=3, knobs={"arms": [0, 2]},
                                         checkpoint_every=100)
    trainer.train()
    train = sched.result(config).train
    ref = make("mixed", n_arms=3, seed=0, arms=[0, 2])   # the sequence `hb real` gives (the loop's calls)
    for call, row in zip(rec.calls, train.itertuples()):
        counts = ref.select(batch_groups=2).counts
        ref.update(Feedback(arm=None, counts=counts))
        assert row.arm == -1
        assert [getattr(row, f"alloc_{h}") for h in HARNESSES] == counts.tolist() == [1, 0, 1]
        assert [call["harness"].count(h) // 4 for h in HARNESSES] == counts.tolist()


def test_gradient_accumulation_still_one_allocation_per_step(tmp_path):
    trainer, sched, config, rec = _build(tmp_path, steps=2, checkpoint_every=100,
                                         extra_args={"per_device_train_batch_size": 4,
                                                     "gradient_accumulation_steps": 2})
    trainer.train()
    train = sched.result(config).train
    assert len(rec.calls) == 2 and [len(c["harness"]) for c in rec.calls] == [8, 8]
    assert [c["harness"] for c in rec.calls] == [["json"] * 8, ["xml"] * 8]
    assert list(train["groups_optimized"]) == [2, 2] and list(train["arm"]) == [0, 1]


def test_any_local_checkpoint_directory(tmp_path):
    tok = trl_run.byte_tokenizer()
    trl_run.tiny_qwen2(tok, "tiny", 3).save_pretrained(tmp_path / "ckpt")
    tok.save_pretrained(tmp_path / "ckpt")
    trainer, sched, config, rec = _build(tmp_path, steps=1, checkpoint_every=100, model_path=str(tmp_path / "ckpt"))
    trainer.train()
    assert config["env"]["model"] == str(tmp_path / "ckpt") and len(rec.calls) == 1
    assert sched.result(config).train["tokens"].iloc[0] > 0
    with pytest.raises(UserError, match="local Hugging Face model directory"):
        trl_run.load_local(str(tmp_path / "missing"))


def test_group_signals_hand_computed():
    # group 1: LOO A = 4/3 (r - 0.25) = (1, -1/3, -1/3, -1/3), mean |A| = 0.5; group 2 has no variance
    learn, kept = group_signals(np.array([1, 0, 0, 0, 0.5, 0.5, 0.5, 0.5]), 4)
    assert kept == 1 and learn == pytest.approx(0.5)
    assert group_signals(np.zeros(8), 4) == (None, 0)
    assert group_signals(np.array([1, 0, np.nan, 0]), 4) == (None, 0)
    table = group_table(np.array([1, 0, 0, 0, 0.5, 0.5, 0.5, 0.5, 1, np.nan, 0, 0]), np.repeat([2, 0, 1], 4), 4,
                        costs=np.array([5.0, 6.0, 7.0]))
    np.testing.assert_array_equal(table["arm"], [2, 0, 1])
    np.testing.assert_array_equal(table["retained"], [True, False, False])
    np.testing.assert_allclose(table["mean_abs_adv"][:2], [0.5, 0.0])
    np.testing.assert_allclose(table["success"][:2], [0.25, 0.0])
    assert np.isnan(table["reward_mean"][2]) and table["cost"].tolist() == [5.0, 6.0, 7.0]
    x = torch.arange(3.0)
    assert global_sketch(x, True) is x and torch.equal(global_sketch(x.clone(), False), x)  # one process


def test_native_and_trl_evaluators_draw_the_same_stream(tmp_path, monkeypatch):
    """Both backends evaluate through `native.evaluation.heldout_eval`: same jobs, same
    generator seed for the same (seed, step), the EVAL stream of `real_runs.streams`."""
    import real_runs
    import real_runs.native.evaluation as evaluation
    from real_runs import streams
    from real_runs.world.harnesses import TRAIN_HARNESSES
    seen, play = [], evaluation.play

    def spy(model, jobs, *, generator, **kw):
        seen.append((generator.initial_seed(), [(h.name, t.id) for h, t in jobs]))
        return play(model, jobs, generator=generator, **kw)

    monkeypatch.setattr(evaluation, "play", spy)
    torch.set_num_threads(1)
    native = real_runs.make_adapter(3, device="cpu", warm_steps=0, n_train_tasks=6, n_heldout_tasks=2, eval_tasks=2,
                                    eval_attempts=1, max_new_tokens=4, cache_dir=str(tmp_path))
    tok = trl_run.byte_tokenizer()
    heldout = make_tasks(3, n_train=6, n_heldout=2)[1]
    for step in (0, 7):
        monkeypatch.setattr(native, "_step", step)
        frame = native.evaluate()
        trl_frame = trl_run.held_out_evaluator(trl_run.tiny_qwen2(tok, "tiny", 3), tok, TRAIN_HARNESSES, heldout,
                                               seed=3, step=lambda: step, max_new=4)()
        (a, jobs_a), (b, jobs_b) = seen[-2:]
        assert a == b == streams.torch_seed(3, streams.EVAL, step) and jobs_a == jobs_b and len(jobs_a) == 14
        assert frame[["suite", "task", "harness", "attempt"]].equals(trl_frame[["suite", "task", "harness", "attempt"]])
    assert seen[0][0] != seen[2][0]


def test_reward_plays_the_harness():
    tasks = make_tasks(0, n_train=6, n_heldout=0)[0]
    data = harness_dataset(tasks, ["xml", "json"])
    assert data.num_rows == 12 and data["harness"][:6] == ["xml"] * 6
    reward = harness_reward(tasks)
    xml, json_ = get_harness("xml"), get_harness("json")
    t = tasks[0]
    good_xml = xml.demonstration(t)[0]
    good_json = "".join(json_.demonstration(t))   # open loop: one line per turn
    assert reward([""] * 3, [good_xml, "junk", good_json], ["xml", "xml", "json"], [t.id] * 3) == [1.0, 0.0, 1.0]


def test_user_errors(tmp_path):
    settings = trl_run.TRL_KNOBS.settings
    with pytest.raises(UserError, match="--backend trl has no knob 'nope'"):
        settings({"nope": 1})
    with pytest.raises(UserError, match=r"trl.harnesses=\['json'\] is not allowed: expected a list of at least 2"):
        settings({"harnesses": ["json"]})
    with pytest.raises(UserError, match="harness='nope' is unknown"):
        settings({"harnesses": ["json", "nope"]})
    with pytest.raises(UserError, match="trl.lr=-1 is out of range"):
        settings({"lr": -1})
    assert settings({"lr": 1}).lr == 1.0 and isinstance(settings({"lr": 1}).lr, float)
    assert trl_run.env_section(settings({"harnesses": ("xml", "kv")}))["harnesses"] == ["xml", "kv"]
    with pytest.raises(UserError, match="steps_per_generation"):
        _build(tmp_path, extra_args={"steps_per_generation": 2})


def test_benchmark_scheduler_hooks_per_step(benchmark):
    """Everything the TRL backend adds to one optimizer step (select, rows, sketch of 65,536
    coordinates before clipping, update sketch, L, policy update, train row), on the
    gpu-small Qwen2 (4 blocks of width 256), 6 harnesses, 8 groups x G = 8, non-zero
    gradients and rewards. Divide by the step time for the overhead fraction."""
    from real_runs.integrations.trl_grpo import HarnessScheduler
    torch.set_num_threads(1)
    names = ["json", "xml", "func", "shell", "sexp", "kv"]
    model = trl_run.tiny_qwen2(trl_run.byte_tokenizer(), "gpu-small", 0)
    gen = torch.Generator().manual_seed(1)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    data = harness_dataset(make_tasks(0, n_train=12, n_heldout=0)[0], names)
    sched = HarnessScheduler(make("harnessbandit", n_arms=6, seed=0, warmup_rounds=0), names, data, seed=0)
    sched.attach(model, group_size=8, batch_groups=8)
    assert sched.sketch.dim == 65536
    rng = np.random.default_rng(0)

    def step():
        sched.on_step_begin(None, None, None)
        sched.begin()
        sched.set_rewards(torch.from_numpy(rng.integers(0, 2, (64, 1)).astype(float)), torch.ones(1))
        sched.take_sketch(True)
        sched.on_optimizer_step(None, None, None)
        return sched.finish()

    row = benchmark(step)
    assert np.isfinite(row["learnability"]) and row["seconds_sketch"] > 0 and row["seconds_scheduler"] > 0
    assert row["overhead_frac"] == step_overhead(row) and 0 < row["overhead_frac"] <= 1


@pytest.mark.slow
def test_data_parallel_two_ranks_agree(tmp_path):
    """Two gloo ranks: each trains on its own group of the selected harness; the gathered
    rewards give both ranks the same L, the DDP-averaged gradients the same sketch."""
    import json
    import socket
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                           "--master_addr", "127.0.0.1", "--master_port", str(port),
                           os.path.join(here, "real_runs_trl_ddp_worker.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = (np.load(tmp_path / f"rank{r}.npz") for r in (0, 1))
    assert int(r0["world"]) == 2 and bool(r0["synced"])
    assert r0["arm"].tolist() == r1["arm"].tolist() == [0, 1, 2]
    calls0, calls1 = json.loads(str(r0["calls"])), json.loads(str(r1["calls"]))
    for step, (c0, c1) in enumerate(zip(calls0, calls1)):
        assert c0["harness"] == c1["harness"] == [HARNESSES[step]] * 4     # one group per rank
        assert len(set(c0["task"])) == len(set(c1["task"])) == 1 and c0["task"] != c1["task"]
    np.testing.assert_array_equal(r0["learn"], r1["learn"])
    np.testing.assert_array_equal(r0["transfer"], r1["transfer"])
    np.testing.assert_array_equal(r0["sketch"], r1["sketch"])
    assert np.isfinite(r0["learn"]).any() and (np.abs(r0["sketch"]).sum(axis=1) > 0).all()


def test_group_filter_zeroes_dropped_groups_and_counts_kept_ones():
    """TRL keeps every generated group: with `keep_band` set, the groups the filter drops
    (the native trainer's rule, on the step's global rewards) get advantage 0, and L,
    groups_retained and `generated` follow the filter."""
    from hbsim.sampling import GroupFilter
    from real_runs.integrations.trl_grpo import HarnessScheduler
    tasks = make_tasks(0, n_train=6, n_heldout=1)[0]
    data = harness_dataset(tasks, HARNESSES)
    sched = HarnessScheduler(make("uniform", n_arms=3, seed=0), HARNESSES, data, seed=0,
                             group_filter=GroupFilter("0.5,1.0"))
    sched.group_size, sched.recorder.batch_groups = 4, 3
    rows = sched.begin()
    assert len(rows) == 12
    # group 0: mean .25 (dropped by the band), group 1: mean .5 (kept), group 2: mean .75 (kept)
    rewards = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0], dtype=torch.float32)
    sched.set_rewards(rewards.unsqueeze(1), torch.ones(1))
    assert sched._step.keep.tolist() == [False, True, True]
    adv = torch.ones(12)
    np.testing.assert_array_equal(sched.filter_advantages(adv).numpy(), [0] * 4 + [1] * 8)
    np.testing.assert_array_equal(sched.filter_advantages(torch.ones(6), rank=1).numpy(), [1] * 6)   # rows 6..11
    np.testing.assert_array_equal(sched.filter_advantages(torch.ones(6), rank=0).numpy(), [0] * 4 + [1] * 2)
    np.testing.assert_array_equal(sched.filter_advantages(torch.ones(12, 3)).numpy()[:, 0], [0] * 4 + [1] * 8)
    sched.generated(0.1, 0.0, 48)
    row = sched.finish()
    # L over the kept groups: LOO mean |A| = 2/3 (k = 2 of 4) and 0.5 (k = 3 of 4)
    assert row["groups_retained"] == 2 and row["groups_optimized"] == 3
    assert row["learnability"] == pytest.approx((2 / 3 + 0.5) / 2)
    fb = sched.recorder.rows[-1]
    assert fb["step"] == 1
    plain = HarnessScheduler(make("uniform", n_arms=3, seed=0), HARNESSES, data, seed=0)
    plain.group_size, plain.recorder.batch_groups = 4, 3
    plain.begin()
    plain.set_rewards(rewards.unsqueeze(1), torch.ones(1))
    assert plain._step.keep is None and plain.filter_advantages(adv) is adv       # no filter: untouched
    plain.generated(0.1, 0.0, 48)
    assert plain.finish()["groups_retained"] == 3


def test_trl_knobs_include_the_group_filter_recorded_only_when_set(tmp_path):
    from hbsim.sampling import FILTER_KNOBS
    for name, knob in FILTER_KNOBS.items():
        assert trl_run.TRL_KNOBS[name] == knob
    cfg = trl_run.TRL_KNOBS.settings({"keep_band": [0.25, 0.75], "min_abs_adv": 0.1})
    assert trl_run.env_section(cfg)["keep_band"] == "0.25,0.75"
    assert "keep_band" not in trl_run.env_section(trl_run.TRL_KNOBS.settings({}))
    with pytest.raises(UserError, match=r"^trl\.keep_band='x' is not allowed"):
        trl_run.TRL_KNOBS.settings({"keep_band": "x"})


def test_trainer_applies_the_filter_to_trls_advantages(tmp_path):
    torch.set_num_threads(1)
    cfg = trl_run.TRL_KNOBS.settings(dict(harnesses=HARNESSES, n_train_tasks=12, n_heldout_tasks=2, eval_tasks=1,
                                          max_completion_length=MAXLEN, batch_groups=2, group_size=4, lr=1e-3,
                                          sketch_dim=512, keep_band=[0.0, 0.3]))
    pc = resolve_policy({"name": "uniform", "label": "uniform"}, len(HARNESSES))
    trainer, sched, config = trl_run.build(cfg, policy_cfg=pc, seed=0, steps=2, out=str(tmp_path / "f"),
                                           extra_rewards=[Recorder()], checkpoint_every=100)
    assert sched.filter.keep_band == "0.0,0.3" and config["env"]["keep_band"] == "0.0,0.3"
    seen = []
    real = sched.filter_advantages

    def spy(adv, rank=0):
        out = real(adv, rank)
        seen.append((sched._step.keep.copy(), adv.clone(), out.clone()))
        return out

    sched.filter_advantages = spy
    trainer.train()
    assert len(seen) == 2
    for keep, before, after in seen:
        rows = np.repeat(keep, 4)
        np.testing.assert_array_equal(after.numpy()[~rows], 0.0)
        np.testing.assert_array_equal(after.numpy()[rows], before.numpy()[rows])
    # TRL gave the dropped groups non-zero advantages, which the filter removed
    assert any(np.abs(b.numpy()[~np.repeat(k, 4)]).sum() > 0 for k, b, _ in seen)
    train = sched.result(config).train
    assert train["groups_retained"].tolist() == [int(k.sum()) for k, _, _ in seen]


def test_trl_settings_take_eval_budget_as_the_native_backend_does():
    from types import SimpleNamespace
    args = SimpleNamespace(set=["eval_budget=groups:4,2", "lr=1e-3"], policy="uniform", label=None, model=None,
                           preset="tiny", steps=3, seed=0, eval_every=None, counterfactual=None)
    cfg, policy_cfg, run = trl_run.settings(args)
    assert run == {"steps": 3, "seed": 0, "eval_budget": "groups:2,4"} and cfg.lr == 1e-3
    assert policy_cfg["name"] == "uniform"
    assert trl_run.settings(SimpleNamespace(**{**vars(args), "set": []}))[2] == {"steps": 3, "seed": 0}
    with pytest.raises(UserError, match="eval_budget='groups:x' is not allowed"):
        trl_run.settings(SimpleNamespace(**{**vars(args), "set": ["eval_budget=groups:x"]}))


def test_trl_run_evaluates_at_each_cost_milestone(tmp_path):
    # 2 groups generated per step: milestones 3 and 4 are first reached after steps 2 and 2, 7 after step 4
    trainer, sched, config, _ = _build(tmp_path, policy="uniform", checkpoint_every=100, eval_budget="groups:3,4,7")
    assert config["eval_budget"] == "groups:3,4,7"
    trainer.train()
    result = sched.result(config)
    assert result.meta["config"]["eval_budget"] == "groups:3,4,7"
    ev = result.eval.dropna(subset=["budget_value"])
    assert sorted(set(zip(ev["budget_value"], ev["step"], ev["cost_reached"]))) == [(3.0, 2, 4.0), (4.0, 2, 4.0),
                                                                                      (7.0, 4, 8.0)]
    assert set(ev["budget_unit"]) == {"groups"}
    plain = _build(tmp_path, name="plain", policy="uniform", steps=1, checkpoint_every=100)[2]
    assert "eval_budget" not in plain
