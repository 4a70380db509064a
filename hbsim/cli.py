"""`hb`: the command-line entry point.

Subcommands live in the package that owns them and are found through a registry of
module names, imported only when used, so `hb policies` does not import torch and the
packages keep their one-way dependencies (policies <- hbsim <- ablations, real_runs,
reports; tests/test_layers.py). A subcommand module provides

    add_arguments(parser: argparse.ArgumentParser) -> None
    main(args: argparse.Namespace) -> int

Global options come before the command: `--plugin MODULE` (repeatable) imports a module that
registers the user's own policies (`policies.registry.load_plugins`) before the command's
arguments are read, so every command, its `--help` and its worker processes know them
(docs/EXTENDING.md): `hb --plugin mypkg.policies sim --policy mine`.

Errors meant for users are `policies.errors.UserError` (argparse's errors included)
and the environment's refusals to write (`ENVIRONMENT_ERRNOS`: disk full, quota, a
read-only file system, an immutable file): they become one line on stderr and exit code
2 (set HB_DEBUG=1, or true/yes, to see the traceback instead; any other value, 0
included, does not). Any other exception -- a plain ValueError, KeyError, OSError... --
is a bug or an unexpected failure and shows its full traceback. A closed stdout (`hb
policies | head`) ends the command quietly with exit 0.
"""
from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys

from policies.errors import UserError
from policies.registry import load_plugins

#: subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "policies": ("policies.cli", "list every scheduling policy with its default knobs"),
    "sim": ("ablations.sim_cli", "compare policies on a synthetic environment"),
    "grid": ("ablations.cli", "plan, run, inspect and collect ablation grids"),
    "report": ("reports.cli", "paired per-task significance report of a grid or run directory"),
    "real": ("real_runs.cli", "real GRPO training of a transformer, scheduled by a policy"),
    "demo": ("ablations.demo", "the main job: paper-design grid on the bernoulli env + report"),
    "validity": ("ablations.validity_cli", "does L, T or the fused score predict the true gain? (--counterfactual runs)"),
    "calibrate": ("ablations.calibrate", "A/A calibration: false-positive rate of every test of hb report"),
    "scenarios": ("ablations.scenarios_cli", "the scenario suite and your own scenario files: list, show, check oracle vs uniform"),
    "stress": ("ablations.stress", "every policy on every scenario and axis: share of the best reference's gain, one resumable grid"),
    "twin": ("ablations.twin_cli", "fit a twin of your runs (a scenario file) and check that it ranks policies as they do"),
}

#: OSErrors that say the machine refused a write, not that hb has a bug: one line, exit 2
ENVIRONMENT_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                      errno.EROFS: "the file system is read-only", errno.EPERM: "the operation is not permitted",
                      errno.EACCES: "permission denied"}


def debug() -> bool:
    """HB_DEBUG set to a true value (1, true, yes; any case)."""
    return os.environ.get("HB_DEBUG", "").strip().lower() in ("1", "true", "yes")


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports errors as one line and exits with code 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UserError(f"{self.prog}: {message}")


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="hb", description="HarnessBandit: study harness-scheduling policies for multi-harness GRPO.")
    parser.add_argument("--plugin", action="append", default=[], metavar="MODULE",
                        help="import MODULE first: it registers your own policies (repeatable; docs/EXTENDING.md)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    for name, (module, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, description=help_text, add_help=False)
    return parser


def _load(name: str, argv: list[str]):
    module_name, help_text = SUBCOMMANDS[name]
    module = importlib.import_module(module_name)
    parser = ArgumentParser(prog=f"hb {name}", description=help_text)
    module.add_arguments(parser)
    return module, parser.parse_args(argv)


def global_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the --plugin modules, the rest of argv from the command on); `--plugin M` and
    `--plugin=M` before the command."""
    plugins, rest = [], list(argv)
    while rest and (rest[0] == "--plugin" or rest[0].startswith("--plugin=")):
        flag = rest.pop(0)
        value = flag.partition("=")[2] if "=" in flag else (rest.pop(0) if rest else "")
        if not value or value.startswith("-"):
            raise UserError(f"hb: --plugin {value!r} is not allowed: expected a module name, "
                             "e.g. hb --plugin mypkg.policies sim ...")
        plugins.append(value)
    return plugins, rest


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        plugins, argv = global_options(argv)
        try:
            load_plugins(plugins)
        except UserError as exc:
            raise UserError(f"hb --plugin: {exc}") from exc
        if not argv or argv[0] in ("-h", "--help"):
            parser.print_help()
            return 0
        if argv[0] not in SUBCOMMANDS:
            raise UserError(f"hb: unknown command {argv[0]!r}; valid commands: {', '.join(SUBCOMMANDS)}")
        if any(a == "--plugin" or a.startswith("--plugin=") for a in argv[1:]):
            raise UserError(f"hb {argv[0]}: --plugin is a global option: put it before the command "
                             f"(hb --plugin MODULE {argv[0]} ...)")
        module, args = _load(argv[0], argv[1:])
        code = int(module.main(args) or 0)
        sys.stdout.flush()              # a closed pipe shows here, not in the interpreter's exit
        return code
    except UserError as exc:
        if debug():
            raise
        print(f"error: {exc}".splitlines()[0], file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:             # `hb policies | head`: the reader left; say nothing more
        _quiet_stdout()
        return 0
    except OSError as exc:
        if exc.errno not in ENVIRONMENT_ERRNOS or debug():
            raise
        where = f" writing {exc.filename!r}" if exc.filename else ""
        print(f"error: {ENVIRONMENT_ERRNOS[exc.errno]}{where} ({exc.strerror or exc}); nothing half-written is "
              f"kept: free space or fix the permissions and run the command again", file=sys.stderr)
        return 2


def _quiet_stdout() -> None:
    """stdout to /dev/null, so the interpreter's final flush raises no second BrokenPipeError."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a descriptor
        pass


if __name__ == "__main__":
    sys.exit(main())
