"""real_runs: real GRPO training of a small transformer on multi-harness tool-use tasks,
scheduled by the same policy objects as the synthetic bandits.

    from real_runs import make_adapter, adapter_knobs, GRPOAdapter
    adapter = make_adapter(seed=0, preset="tiny", lr=1e-3)    # a hbsim TrainingAdapter
    hbsim.run(policies.make("harnessbandit", n_arms=len(adapter.harnesses), seed=0), adapter, steps=3)

Sub-packages by concern: `world` (the task world, no torch), `native` (the torch trainer
behind hbsim's adapter, and the presets' knob table), `integrations` (TRL's GRPOTrainer
and verl's sampler); `streams` names every random stream, `cli` is `hb real`, and both of
its backends share `command` (the run knobs they take) and `resume` (`same_run`). torch is
imported only when a trainer is used, so `real_runs.world` and grid validation stay light.
"""
from __future__ import annotations

from harnessbandit.origin import pin as _pin

_pin()   # the distribution's package names resolve to the installed packages (harnessbandit/origin.py)

from real_runs.native.presets import PRESETS, REAL_KNOBS, RealConfig, config_of, knob_defaults, resolve, resolve_env
from real_runs.world.harnesses import TRAIN_HARNESSES

__all__ = ["GRPOAdapter", "RealConfig", "REAL_KNOBS", "PRESETS", "adapter_factory", "adapter_knobs", "make_adapter",
           "resolve", "resolve_env"]


def adapter_knobs() -> dict:
    """Default knobs of `[env] kind = "real"` (None = the preset's value), with
    `n_harnesses` (the number of training harnesses, which policies need)."""
    return {"n_harnesses": len(TRAIN_HARNESSES), **knob_defaults()}


def make_adapter(seed: int = 0, *, progress=None, **knobs):
    """A `GRPOAdapter` for `seed` with the given knobs (`preset` selects the base sizes;
    None = the preset's value; `kind`, from a grid's env table, must be "real"), resolved by
    `native.presets.config_of`. progress(done, total): warm-start steps."""
    from real_runs.native.adapter import GRPOAdapter
    return GRPOAdapter(config_of(knobs), seed=seed, progress=progress)


def adapter_factory(cfg: dict, progress=None):
    """`hbsim.run_config(cfg, adapter_factory=real_runs.adapter_factory)` for a resolved run
    config whose env section is `{"kind": "real", **knobs}` (`resolve_env`)."""
    return make_adapter(cfg.get("seed", 0), progress=progress, **cfg.get("env", {}))


def __getattr__(name: str):
    if name == "GRPOAdapter":   # torch: imported on first use
        from real_runs.native.adapter import GRPOAdapter
        return GRPOAdapter
    raise AttributeError(f"module 'real_runs' has no attribute {name!r}")
