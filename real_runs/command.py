"""The run knobs of `hb real`, both backends (`real_runs.cli` native, `--backend trl`:
`real_runs.integrations.trl_run`): the ones given as flags and the ones `--set` takes, each
parsed once by `hbsim.run_knobs` and named in an error as the user typed it (`--eval-every 0`
names --eval-every, `--set eval_budget=x` names eval_budget).
"""
from __future__ import annotations

from pathlib import Path

from hbsim.run_knobs import Sets, from_command
from policies.errors import UserError
from real_runs.tracking import DEFAULT_PROJECT, TRACKERS, check_tracker, log_names

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
                             "(extra harnessbandit[TRACKER]; W&B offline unless WANDB_MODE is set; every file "
                             "inside --out)")
    parser.add_argument("--log-project", default=None, metavar="NAME",
                        help=f"the tracker's project (default: WANDB_PROJECT for wandb, else {DEFAULT_PROJECT!r}; "
                             "TensorBoard has none)")
    parser.add_argument("--log-name", default=None, metavar="NAME",
                        help="the tracker's run name (default: WANDB_NAME for wandb, else the --out folder's name)")


def check_log(args) -> None:
    """Before any work: the --log tracker's package is installed (one line naming the extra
    otherwise); --log-project / --log-name only with --log, each a name; `args.log_project`
    and `args.log_name` resolved (`tracking.log_names`)."""
    kind = getattr(args, "log", None)
    check_tracker(kind)
    project, name = getattr(args, "log_project", None), getattr(args, "log_name", None)
    if kind is None:
        given = [flag for flag, value in (("--log-project", project), ("--log-name", name)) if value is not None]
        if given:
            raise UserError(f"{' and '.join(given)}: only allowed with --log tensorboard|wandb|trackio")
        return
    args.log_project, args.log_name = log_names(kind, project, name, Path(args.out).resolve().name)
