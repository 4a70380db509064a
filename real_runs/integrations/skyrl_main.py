"""The project's SkyRL entry point (docs/SKYRL.md): `python -m real_runs.integrations.skyrl_main
<SkyRL's overrides> harnessbandit.harnesses=[...] harnessbandit.steps=N ...`. No SkyRL, Ray or
Hydra import at module level: the installed skyrl is checked from its package metadata first,
the `harnessbandit.*` arguments are split off and checked, and DAPO dynamic sampling refused,
each as one line (exit 2), before Ray starts; then SkyRL's own `main` path (its config parse,
`validate_cfg`, `initialize_ray`) runs `HarnessPPOExp` in a Ray task as SkyRL runs its own.
"""
from __future__ import annotations

import sys

from policies.errors import UserError
from real_runs.integrations.skyrl_sampler import dynamic_sampling_problem, installed_problem, split_arguments
from real_runs.integrations.verl_sampler import SKYRL_KNOBS


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    problem = installed_problem()
    if problem:
        _fail(problem)
    try:
        settings, rest = split_arguments(sys.argv[1:] if argv is None else argv)
        SKYRL_KNOBS.settings(settings)                    # a misspelt or bad knob: one line now
    except UserError as exc:
        _fail(str(exc))
    import ray
    from skyrl.train.config import SkyRLTrainConfig
    from skyrl.train.utils.utils import initialize_ray, validate_cfg

    cfg = SkyRLTrainConfig.from_cli_overrides(rest)
    problem = dynamic_sampling_problem(cfg.trainer.algorithm.dynamic_sampling.type)
    if problem:
        _fail(problem)
    validate_cfg(cfg)
    initialize_ray(cfg)
    try:
        ray.get(_entrypoint().remote(cfg, settings))
    except Exception as exc:           # noqa: BLE001 - a refusal inside the Ray task: its one line
        cause = getattr(exc, "cause", None)
        if isinstance(cause, UserError):
            _fail(str(cause))
        raise


def _entrypoint():
    import ray

    @ray.remote(num_cpus=1)
    def run(cfg, settings):
        from real_runs.integrations.skyrl_trainer import HarnessPPOExp
        HarnessPPOExp(cfg, settings).run()

    return run


if __name__ == "__main__":
    main()
