"""The run knobs of `hb real`, both backends (`real_runs.cli` native, `--backend trl`:
`real_runs.integrations.trl_run`): the ones given as flags and the ones `--set` takes, each
parsed once by `hbsim.run_knobs` and named in an error as the user typed it (`--eval-every 0`
names --eval-every, `--set eval_budget=x` names eval_budget).
"""
from __future__ import annotations

from hbsim.run_knobs import Sets, from_command
from real_runs.tracking import TRACKERS, check_tracker

#: run knobs given as flags (--steps, --seed, --eval-every, --counterfactual)
RUN_FLAGS = ("steps", "seed", "eval_every", "counterfactual")
#: run knobs `--set KEY=VALUE` takes (`--backend trl`: batch_groups is its TRL knob batch_groups)
RUN_SETS = ("batch_groups", "eval_every", "eval_budget")


def run_knobs(args) -> tuple[Sets, dict]:
    """(the --set items by section, {knob: checked value} of the run knobs typed) of `hb real` args."""
    return from_command(args, RUN_FLAGS, RUN_SETS)


def add_log_option(parser) -> None:
    """`--log TRACKER`: stream each train row's `hb/` scalars (real_runs.tracking) to a tracker."""
    parser.add_argument("--log", default=None, choices=list(TRACKERS),
                        help="also stream each step's scheduler signals (hb/ scalars) to this tracker "
                             "(extra harnessbandit[TRACKER]; W&B offline unless WANDB_MODE is set)")


def check_log(args) -> None:
    """Before any work: the --log tracker's package is installed (one line naming the extra otherwise)."""
    check_tracker(getattr(args, "log", None))
