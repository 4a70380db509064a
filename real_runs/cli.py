"""`hb real`: one real GRPO run, its harness chosen each step by a scheduling policy.

    hb real --preset tiny --policy harnessbandit --seed 0 --steps 3 --out runs/real0
    hb real ... --steps 6 --out runs/real0 --resume      # continue the same run to step 6
    hb real --preset cpu-world --policy uniform --steps 60 --counterfactual 10 --out runs/probe0

The run goes through `hbsim.run_config` (the one loop of sim runs and grid cells) with the
config `build_config` resolves (`real_runs.resolve_env`: a grid cell of the same run has
the same hash). DIR is a run directory (SPEC §7): train.parquet, eval.parquet, groups.parquet, run.json
(counterfactual.parquet with --counterfactual), and checkpoints/last.pt, written after step 1, every --checkpoint-every steps, at the end,
and when SIGTERM or SIGINT arrives (the run then stops after the current step, exit
128 + signal number; a second signal stops at once). `--resume` of a DIR without a
checkpoint is a user error. Progress (the warm start included), per-step timings and the
scheduler overhead fraction go to stderr; the summary to stdout.

Data parallel: under `torchrun --nproc_per_node N -m hbsim.cli real ...` every rank runs
the same loop on its share of the groups (gloo on CPU, nccl on CUDA with device
cuda:LOCAL_RANK); sketches and gradients are SUMmed across ranks, so every rank's policy
sees the same feedback and draws the same arms. Only rank 0 writes files and prints.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from hbsim.contract import folders, lifeline, threads

from hbsim.contract import markers
from hbsim.contract import CHECKPOINT, RUN_JSON, TRL_CHECKPOINT
from policies import validate
from policies.errors import UserError, require_extra
from real_runs.command import RUN_SETS, add_log_option, check_log, run_knobs
from real_runs.native.presets import PRESETS, preset_run_keys
from real_runs.resume import same_run, within_steps


def add_arguments(parser) -> None:
    parser.add_argument("--preset", default=None, choices=list(PRESETS),
                        help="model/run size (default: the preset named like --model if there is one, else tiny)")
    parser.add_argument("--policy", default="harnessbandit", help="scheduling policy name (hb policies)")
    parser.add_argument("--label", default=None, help="policy label in the tables (default: the name)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, required=True, help="optimizer steps to reach")
    parser.add_argument("--out", required=True, help="run directory")
    parser.add_argument("--device", default=None, help="auto, cpu, cuda or cuda:N (default: the preset's)")
    parser.add_argument("--resume", action="store_true", help="continue DIR's checkpoint to --steps")
    parser.add_argument("--model", default=None,
                        help="a named model (smollm2-135m: extra harnessbandit[lm]) or a local Hugging Face "
                             "causal-LM directory (needs transformers)")
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    parser.add_argument("--counterfactual", type=int, default=None, metavar="K",
                        help="every K-th step, a what-if step on each harness and on the mixed batch from the same "
                             "state, restored exactly; writes counterfactual.parquet (native backend; "
                             "hbsim.counterfactual)")
    parser.add_argument("--backend", default="native", choices=["native", "trl"],
                        help="native trainer, or TRL's GRPOTrainer (extra harnessbandit[trl]; "
                             "real_runs.integrations.trl_run)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"override a knob: env knob (lr=3e-4 or env.lr=3e-4; TRL: its knobs), policy.KNOB, "
                             f"or a run knob: {', '.join(RUN_SETS)} (VALUE parsed as JSON, none = unset)")
    add_log_option(parser)


def preset_of(args) -> str:
    """`--preset`, else the preset named like `--model` (smollm2-135m), else tiny."""
    return args.preset or (args.model if args.model in PRESETS else "tiny")


def build_config(args) -> dict:
    """The resolved run config of `hb real` (docs/ARCHITECTURE.md); the env section by
    `real_runs.resolve_env`, exactly as for a grid cell."""
    from hbsim.experiment import resolve_config
    from real_runs.native.presets import resolve_env

    sets, run = run_knobs(args)
    preset = preset_of(args)
    env = {"kind": "real", "preset": preset, "device": args.device}
    if args.model:
        env["model_path"] = args.model
    return resolve_config({"env": {**env, **sets.env},
                           "policy": {"name": args.policy, "label": args.label or args.policy, **sets.policy},
                           **preset_run_keys(preset), **run},
                          resolve_env=resolve_env)


def _init_distributed(args) -> int:
    """Join the torchrun process group if there is one; returns this process's rank."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0
    import torch
    import torch.distributed as dist

    from real_runs.native.presets import resolve
    device = args.device or resolve(preset_of(args)).device
    cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        args.device = f"cuda:{local}"
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    return dist.get_rank()




def _check_out(args) -> None:
    """Before torch is imported: a clairvoyant --policy refused, the numeric flags bounded, --out
    checked by `check_run_dir`."""
    trl = args.backend == "trl"
    from hbsim.loop import attach_ground_truth
    from real_runs.native.lm import check_model, is_named

    args.preset = preset_of(args)        # `--model smollm2-135m` alone: that model's preset (TRL reads it too)
    from policies import POLICIES
    from real_runs.native.presets import PROBE_KNOBS

    if args.policy in POLICIES:           # a clairvoyant reference needs ground truth a real run lacks
        attach_ground_truth(POLICIES[args.policy], None)
    sets, run = run_knobs(args)           # --steps, --seed, --eval-every and the run knobs of --set
    probes = [k for k in PROBE_KNOBS if k in sets.env]
    if probes and run.get("counterfactual") is None:   # they set the what-if evaluation only
        raise UserError(f"--set env.{probes[0]}={sets.env[probes[0]]} is not allowed without --counterfactual K: "
                        "it sets the what-if probes' evaluation; add --counterfactual K or drop it")
    validate.check_int("--checkpoint-every", args.checkpoint_every, 1, validate.MAX_STEPS)
    if trl and args.device is not None:   # TRL runs on the CPU or on its accelerator (use_cpu)
        validate.check_choice("--device", args.device, ("auto", "cpu", "cuda"))
    if args.model is not None and not is_named(args.model) and not Path(args.model).is_dir():
        raise UserError(f"--model {args.model!r} is not a named model or a folder; expected smollm2-135m or a "
                        "local Hugging Face model directory")
    if args.model is not None:
        check_model(args.model)           # a named model's package and GGUF are installed
    check_environment()
    if trl:                               # the extra of the backend, before its import fails in a traceback
        require_extra("trl", "--backend trl", "trl", " (Python >= 3.11)")
    else:
        require_extra("torch", "hb real", "torch")
    check_log(args)
    if trl:
        from real_runs.integrations.trl_run import settings
        settings(args)                 # the TRL knobs, harnesses and policy (torch-free)
    else:
        build_config(args)             # every knob of the native run (torch-free)
    check_run_dir(args.out, args.resume, trl)


#: what torchrun sets besides WORLD_SIZE; without them torch.distributed waits forever
TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def check_environment() -> None:
    """Before torch is imported: WORLD_SIZE only as torchrun sets it (with RANK, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT), and HB_CACHE_DIR (the warm-start cache) not a file."""
    world = os.environ.get("WORLD_SIZE")
    if world is not None:
        if not world.strip().isdigit() or int(world) < 1:
            raise UserError(f"WORLD_SIZE={world!r} is not allowed: expected a positive integer (torchrun sets it)")
        missing = [v for v in TORCHRUN_VARS if v not in os.environ]
        if int(world) > 1 and missing:
            raise UserError(f"WORLD_SIZE={world} is set but {', '.join(missing)} are not: start data parallel runs "
                            "with `torchrun --nproc_per_node N -m hbsim.cli real ...`, or unset WORLD_SIZE")
    cache = os.environ.get("HB_CACHE_DIR")
    if cache:
        probe = Path(cache)
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            raise UserError(f"HB_CACHE_DIR={cache!r} is not allowed: {str(probe)!r} is a file; expected a folder "
                            "for the warm-start cache")


def check_run_dir(out, resume: bool, trl: bool = False) -> None:
    """The run directory `out` of `hb real` (or of examples/trl_harnessbandit.py): never a
    file, a grid, an `hb sim` folder, a report or a folder hb did not create; with `resume`
    a run of ours holding a checkpoint (TRL: DIR/trl/checkpoint-N/ with the scheduler's
    state), without it no run or checkpoint yet. Writes nothing."""
    if resume:
        folders.check_resume_dir(out, TRL_CHECKPOINT if trl else CHECKPOINT)
    folders.check_output_dir(out, "run", force_flag=None)
    out = Path(out)
    if not resume and ((out / RUN_JSON).exists() or any(out.glob(CHECKPOINT))
                       or any(out.glob(TRL_CHECKPOINT))):
        raise UserError(f"--out {str(out)!r} already holds a run; use --resume or another directory")


def main(args) -> int:
    _check_out(args)
    threads.pin_one_thread(threads.NUMPY_VARS, this_process=True)  # numpy's BLAS vs torch's threads
    threads.keep_freed_memory()         # freed tensors reused, not unmapped and faulted in again
    if args.backend == "trl":
        from real_runs.integrations.trl_run import main as trl_main
        return trl_main(args)
    import hbsim
    from hbsim.loop import overhead_fraction
    from real_runs import adapter_factory

    rank = _init_distributed(args)
    if rank:  # followers train in lockstep but never write or print
        sys.stdout = sys.stderr = open(os.devnull, "w")

    out = Path(args.out)
    config = build_config(args)
    saved = _resume_state(out, config, args.steps) if args.resume else None   # DIR checked by _check_out
    saver = Checkpointer(out, config, args.steps, args.checkpoint_every, rank, log=args.log,
                         log_names=(args.log_project, args.log_name))
    if saved is not None:
        saver.resumed_at = int(saved["t"])
    t0 = time.perf_counter()

    def factory(cfg: dict):
        adapter = adapter_factory(cfg, progress=WarmProgress())
        print(f"model ready in {time.perf_counter() - t0:.1f}s (warm start {adapter.warm_key}, device "
              f"{adapter.device})", file=sys.stderr)
        if rank == 0:            # the model loaded: the folder becomes ours before the first step
            markers.claim_output_dir(out, "run", tool="hb real")
        saver.listen()           # from here on SIGTERM / SIGINT stop after a step, with a checkpoint
        return adapter

    try:
        result = hbsim.run_config(config, adapter_factory=factory, state=saved, checkpoint=saver)
    finally:
        saver.restore()
        saver.close_log()
    if saver.stopped_at is not None:
        print(f"stopped by {signal.Signals(saver.signum).name} after step {saver.stopped_at}/{args.steps}: "
              f"checkpoint in {(out / CHECKPOINT).parent}; continue with --resume", file=sys.stderr)
        return 128 + saver.signum
    result.train["overhead_frac"] = overhead_fraction(result.train)
    if rank == 0:
        hbsim.write_run(result, out, overwrite=True)
        markers.complete_output_dir(out)       # the marker last: the run is complete
        _summary(result, out)
        if saver.hint:
            print(f"  {args.log}: {saver.hint}")
    return 0


def _resume_state(out: Path, config: dict, steps: int) -> dict:
    """The loop state of DIR's checkpoint (whose presence `check_run_dir` checked before
    torch was imported); another config or a checkpoint beyond --steps is a user error."""
    from real_runs.native import checkpoint

    saved = checkpoint.load(out)
    same_run(saved["config"], config)
    at = int(saved["loop"]["t"])
    within_steps(at, steps)
    print(f"resumed {out} at step {at}", file=sys.stderr)
    return saved["loop"]


class WarmProgress:
    """progress(done, total) of the warm start: a stderr line at the start, every 10 s and at the end."""

    def __init__(self, every: float = 10.0):
        self.every, self.started, self.last = every, time.perf_counter(), -1e9

    def __call__(self, done: int, total: int) -> None:
        now = time.perf_counter()
        if done in (0, total) or now - self.last >= self.every:
            self.last = now
            print(f"warm start: step {done}/{total} ({now - self.started:.0f}s)", file=sys.stderr)


class Checkpointer:
    """The loop's checkpoint hook: prints the step's line, saves DIR/checkpoints/last.pt after
    step 1, every `every` steps and at the last step, and, once SIGTERM or SIGINT arrived
    (`listen`), saves and stops the run after the current step."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, out: Path, config: dict, steps: int, every: int, rank: int = 0, log: str | None = None,
                 log_names: tuple[str | None, str | None] = (None, None)):
        self.out, self.config, self.steps, self.every, self.rank = out, config, steps, every, rank
        self.log, self.sink = log, None      # --log: the tracker each step's row streams to (rank 0)
        self.resumed_at = -1                 # the step a resumed run continues from (-1: a fresh run)
        self.log_project, self.log_name = log_names   # resolved by command.check_log
        self.hint: str | None = None         # the command that shows the tracker's run (tracking.hint)
        self.signum: int | None = None
        self.stopped_at: int | None = None
        self._previous: dict = {}

    def listen(self) -> None:
        self._previous = lifeline.catch_signals(self.SIGNALS, self._on_signal)

    def close_log(self) -> None:
        if self.sink is not None:
            self.hint = self.sink.hint
            self.sink.close()
            self.sink = None

    def restore(self) -> None:
        lifeline.restore_signals(self._previous)
        self._previous = {}

    def _on_signal(self, signum, frame) -> None:
        if self.signum is not None:      # the second signal: stop at once
            self.restore()
            raise KeyboardInterrupt
        self.signum = signum
        print(f"{signal.Signals(signum).name}: stopping after the current step (again to stop at once)",
              file=sys.stderr)

    def _stop_requested(self, device) -> bool:
        from real_runs.native.trainer import global_sum   # every rank stops after the same step
        stop = global_sum(float(self.signum is not None), device) > 0
        if stop and self.signum is None:
            self.signum = int(signal.SIGTERM)
        return stop

    def __call__(self, loop) -> bool:
        from hbsim.loop import step_overhead
        from real_runs.native import checkpoint

        row, t = loop.rows[-1], loop.t
        name = loop.harnesses[row["arm"]] if row["arm"] >= 0 else "mixed"
        print(f"step {t}/{self.steps} arm={name} reward={row['reward']:.3f} L={row['learnability']:.3f} "
              f"groups gen/opt={row['groups_generated']}/{row['groups_optimized']} tokens={row['tokens']} "
              f"{row['seconds_step']:.2f}s overhead={100 * step_overhead(row):.2f}%", file=sys.stderr)
        if self.log and self.rank == 0:
            if self.sink is None:
                from real_runs.tracking import DEFAULT_PROJECT, open_sink
                self.sink = open_sink(self.log, self.out, loop.harnesses, name=self.log_name or self.out.name,
                                      config=self.config, project=self.log_project or DEFAULT_PROJECT)
                self.sink.logged_through = self.resumed_at   # a resumed run's earlier evaluations were logged
            self.sink.log_step({**row, "overhead_frac": step_overhead(row)}, t, groups=loop.last_groups,
                               evals=loop.evaluations)
        stop = t < self.steps and self._stop_requested(loop.adapter.device)
        if self.rank == 0 and (stop or t == 1 or t % self.every == 0 or t == self.steps):
            checkpoint.save(self.out, self.config, loop.state_dict())
        if stop:
            self.stopped_at = t
        return stop


def _summary(result, out) -> None:
    train, ev = result.train, result.eval
    final = ev[ev["step"] == ev["step"].max()] if len(ev) else ev
    print(f"run {out}: {len(train)} steps, policy {result.meta['label']}, seed {result.meta['seed']}")
    if len(train) and "seconds_step" in train:
        print(f"  mean step {train['seconds_step'].mean():.3f}s; scheduler overhead (sketch + all-reduce + "
              f"policy) {100 * train['overhead_frac'].mean():.2f}% of step time")
    for suite, part in final.groupby("suite"):
        print(f"  {suite}: mean reward {part['reward'].mean():.3f}, success {part['success'].mean():.3f} "
              f"({part['task'].nunique()} tasks x {part['attempt'].nunique()} attempts)")
