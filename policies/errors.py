"""The one user-error class of the project.

Bad configuration, CLI arguments, data files or output paths raise `UserError`
(a `ValueError`, so callers that catch ValueError keep working). The `hb` dispatcher
turns exactly this class into one line on stderr and exit code 2; any other exception
is a bug and shows its traceback.

It lives in `policies`, the root of the dependency graph, so every package (reports
included) raises the same class; this module imports nothing.
"""
from __future__ import annotations


class UserError(ValueError):
    """A user error: the message names the field, the bad value and what is allowed."""


def require_extra(module: str, what: str, extra: str, note: str = "") -> None:
    """Before any work: `what` (a command or option) needs the optional extra
    `harnessbandit[extra]`, imported as `module`; when that is not installed (looked up
    without importing it), one UserError line naming the pip command. The one wording of a
    missing extra (`hb real` without torch, `--backend trl`, `--log TRACKER`, a Hugging Face model)."""
    import importlib.util            # stdlib, at call time: this module imports nothing on load
    if importlib.util.find_spec(module) is None:
        raise UserError(f"{what} needs the optional extra{note}: pip install 'harnessbandit[{extra}]'")
