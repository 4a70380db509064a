"""Where the five packages of the distribution are imported from (stdlib only: a leaf that
every package may import).

The distribution `harnessbandit` installs five top-level packages, `policies`, `hbsim`,
`ablations`, `real_runs` and `reports` (the repository's folders), beside the `harnessbandit`
package. Python looks for a top-level name along `sys.path`, and `python -m`, notebooks and
scripts put the working directory (or the script's folder) first: a user's own folder named
`policies/` or `reports/` there shadows the installed package, and the import fails with a
confusing error far from the cause.

`pin()` (run by `import harnessbandit` and by each of the five packages on import) installs
a finder, first on `sys.meta_path`, that resolves exactly these five names to the folder
this file lies beside (the installed package, or the checkout of an editable install), so
every import harnessbandit makes, and `from harnessbandit import ...` in user code, gets
the installed packages whatever the working directory holds. A folder that would have
shadowed one, or a module of one of these names already imported from elsewhere (which no
finder can replace in a running interpreter), is named in one line, once per process
(the `harnessbandit` logger, a warning; not repeated in worker processes, which inherit
`TOLD_VAR`).
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import multiprocessing
import os
import sys
from pathlib import Path

#: the distribution's top-level packages beside `harnessbandit`
PACKAGES = ("policies", "hbsim", "ablations", "real_runs", "reports")
#: the folder that holds them (site-packages, or the checkout of an editable install)
ROOT = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("harnessbandit")

#: the packages already named in this process tree (inherited by worker processes and forkservers)
TOLD_VAR = "HARNESSBANDIT_SHADOWS_TOLD"


class PinnedFinder(importlib.abc.MetaPathFinder):
    """Finds `PACKAGES` in `ROOT` only (their submodules follow the package's own path)."""

    def find_spec(self, name, path=None, target=None):
        if name not in PACKAGES:
            return None
        return importlib.machinery.PathFinder.find_spec(name, [str(ROOT)])


def _home(name: str) -> Path:
    return ROOT / name


def _where(spec) -> Path | None:
    """The folder (or file) a spec would import from; None for a folder without __init__.py
    (a namespace portion: never imported where a regular package of the name exists)."""
    if spec is None or spec.origin in (None, "namespace"):
        return None
    if spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]).resolve()
    return Path(spec.origin).resolve() if spec.origin else None


def _imported_from(module) -> Path | None:
    path = getattr(module, "__path__", None)
    if path:
        return Path(list(path)[0]).resolve()
    file = getattr(module, "__file__", None)
    return Path(file).resolve() if file else None


def shadows() -> list[tuple[str, str]]:
    """(package, one line) per package whose import would not (or did not) come from `ROOT`:
    a module of its name imported from elsewhere, or a folder earlier on `sys.path`."""
    lines = []
    for name in PACKAGES:
        module = sys.modules.get(name)
        if module is not None:
            where = _imported_from(module)
            if where is not None and where != _home(name):
                lines.append((name, f"harnessbandit: {name!r} was imported from {where}, not from the installed package "
                             f"{_home(name)}: a folder of yours has its name; rename it (or start Python in another "
                             f"folder) and use `from harnessbandit import ...`"))
            continue
        where = _where(importlib.machinery.PathFinder.find_spec(name))
        if where is not None and where != _home(name):
            lines.append((name, f"harnessbandit: your {where} has the name of harnessbandit's package {name!r}; harnessbandit "
                         f"imports its own ({_home(name)}), so `import {name}` gives harnessbandit's here: rename "
                         "yours to import it"))
    return lines


def pin() -> None:
    """Install the finder once and say, once per package and process, what shadows one."""
    if not any(isinstance(f, PinnedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PinnedFinder())
    if multiprocessing.parent_process() is not None:    # a worker: its parent said it already
        return
    told = set(filter(None, os.environ.get(TOLD_VAR, "").split(",")))   # a parent process said these
    for name, line in shadows():
        if name not in told:
            told.add(name)
            LOG.warning(line)
    if told:
        os.environ[TOLD_VAR] = ",".join(sorted(told))   # inherited: a forkserver or worker says nothing again
