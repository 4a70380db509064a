"""The one reader of the TOML files a user hands hb (grid, scenario and study files): the
parsed table, or one line naming the file and what went wrong (missing, a folder, not
UTF-8, unreadable, malformed TOML). Standard library and `policies.errors` only."""
from __future__ import annotations

import os
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

from policies.errors import UserError


def read_toml(path: str | os.PathLike, what: str, *, shown: str | None = None,
              error: type[UserError] = UserError) -> tuple[dict, bytes]:
    """(the table, the file's bytes) of TOML file `path`, a `what` file ("grid", "scenario",
    "study"); `error` (a UserError class) naming `shown` (default the path) for a file that
    cannot be read or parsed."""
    shown = os.fspath(path) if shown is None else shown
    try:
        data = Path(path).read_bytes()
        return tomllib.loads(data.decode("utf-8")), data
    except FileNotFoundError:
        raise error(f"{shown}: {what} file not found") from None
    except IsADirectoryError:
        raise error(f"{shown}: is a directory, expected a {what} TOML file") from None
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{shown}: malformed TOML: {exc}") from None
    except (UnicodeDecodeError, OSError) as exc:    # not UTF-8; unreadable
        raise error(f"{shown}: cannot read the {what} file: {str(exc)[:200]}") from None
