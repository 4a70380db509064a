"""The project's verl entry point (docs/VERL.md): `python -m real_runs.integrations.verl_main
<verl's Hydra overrides>`, verl's own `ppo_trainer` config and overrides, with the harness
scheduler inside. No verl, Hydra or Ray import at module level: the installed verl is checked
from its package metadata first (`verl_entry_problem`), so a missing or unsupported verl is one
line naming the supported ranges (exit 2) before anything starts.

* verl 0.9 with `trainer.use_v1=true` (0.9's default): the v1 trainer
  `real_runs.integrations.verl_v1.HarnessPPOTrainer`, registered as `trainer.v1.trainer_mode=
  harnessbandit` by importing it here (never through verl's `verl.plugins` entry points, whose
  failures verl logs at debug level only); `trainer.v1.trainer_mode` unset or `sync` selects it,
  an async mode or DAPO-style refill is one line (`verl_v1.v1_problem`).
* verl 0.5-0.8, or 0.9 with `trainer.use_v1=false`: the legacy `HarnessRayPPOTrainer`
  (`real_runs.integrations.verl_trainer`).
"""
from __future__ import annotations

import os
import sys

from policies.errors import UserError
from real_runs.integrations.verl_sampler import installed_version, verl_entry_problem, version_tuple


def _fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _compose_and_run(config) -> None:
    from omegaconf import open_dict
    v1 = version_tuple(installed_version("verl")) >= (0, 9) and bool(config.trainer.get("use_v1", False))
    if v1:
        from real_runs.integrations import verl_v1
        problem = verl_v1.v1_problem(config)
        if problem:
            _fail(problem)
        with open_dict(config):
            config.trainer.v1.trainer_mode = verl_v1.TRAINER_NAME
        verl_v1.run(config)
    else:
        from real_runs.integrations import verl_trainer
        verl_trainer.run(config)


def main(argv: list[str] | None = None) -> None:
    problem = verl_entry_problem(installed_version("verl"))
    if problem:
        _fail(problem)
    import hydra
    from verl.trainer import main_ppo

    if argv is not None:
        sys.argv = [sys.argv[0], *argv]

    @hydra.main(config_path=os.path.join(os.path.dirname(main_ppo.__file__), "config"),
                config_name="ppo_trainer", version_base=None)
    def _main(config):
        try:
            _compose_and_run(config)
        except UserError as exc:
            _fail(str(exc))

    _main()


if __name__ == "__main__":
    main()
