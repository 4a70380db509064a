"""The one reader of the TOML files a user hands hb (grid, scenario and study files): the
parsed table, or one line naming the file and what went wrong (missing, a folder, not a
regular file, over MAX_TOML_BYTES, nested deeper than MAX_TOML_DEPTH, not UTF-8,
unreadable, malformed TOML). Only a regular file is opened (a named pipe would block
forever, a link to /dev/zero read until memory runs out), and at most MAX_TOML_BYTES + 1
bytes are read. Standard library and `policies.errors` only."""
from __future__ import annotations

import os
import stat

try:
    import tomllib
except ImportError:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

from policies.errors import UserError

#: the largest TOML file hb reads (a grid of a thousand policies is under 100 KB)
MAX_TOML_BYTES = 1_000_000
#: the deepest nesting of tables and arrays a file may have (hb's files use 3 or 4 levels);
#: the parser itself recurses, so a deeper file would be a RecursionError, not a line
MAX_TOML_DEPTH = 32


def read_toml(path: str | os.PathLike, what: str, *, shown: str | None = None,
              error: type[UserError] = UserError) -> tuple[dict, bytes]:
    """(the table, the file's bytes) of TOML file `path`, a `what` file ("grid", "scenario",
    "study"); `error` (a UserError class) naming `shown` (default the path) for a file that
    cannot be read or parsed."""
    shown = os.fspath(path) if shown is None else shown
    try:
        mode = os.stat(path).st_mode               # the link's target
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise error(f"{shown}: is not a regular file (a named pipe, a device or a socket); allowed: a {what} "
                        "TOML file")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):     # replaced since the stat
                raise error(f"{shown}: is not a regular file; allowed: a {what} TOML file")
            data = fh.read(MAX_TOML_BYTES + 1)
    except FileNotFoundError:
        raise error(f"{shown}: {what} file not found") from None
    except IsADirectoryError:
        raise error(f"{shown}: is a directory, expected a {what} TOML file") from None
    except OSError as exc:                          # unreadable, a link loop
        raise error(f"{shown}: cannot read the {what} file: {str(exc)[:200]}") from None
    if len(data) > MAX_TOML_BYTES:
        raise error(f"{shown}: the {what} file is larger than {MAX_TOML_BYTES:,} bytes; allowed: at most "
                    f"{MAX_TOML_BYTES:,}")
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise error(f"{shown}: malformed TOML: {exc}") from None
    except RecursionError:
        raise error(_too_deep(shown, what)) from None
    except UnicodeDecodeError as exc:
        raise error(f"{shown}: cannot read the {what} file: {str(exc)[:200]}") from None
    if _depth(table) > MAX_TOML_DEPTH:
        raise error(_too_deep(shown, what))
    return table, data


def _too_deep(shown: str, what: str) -> str:
    return (f"{shown}: the {what} file nests tables or arrays more than {MAX_TOML_DEPTH} levels deep; allowed: at "
            f"most {MAX_TOML_DEPTH} levels")


def _depth(value) -> int:
    """The nesting depth of parsed TOML (a scalar 0, a table or array one more than its
    deepest value), without recursion (a header `[a.b.c...]` nests without the parser's)."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            items = item.values()
        elif isinstance(item, list):
            items = item
        else:
            continue
        deepest = max(deepest, level + 1)
        if level + 1 <= MAX_TOML_DEPTH + 1:        # deeper than the limit: refused anyway
            stack.extend((v, level + 1) for v in items)
    return deepest
