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
