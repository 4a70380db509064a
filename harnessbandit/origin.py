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
finder can replace in a running interpreter), is named once per process tree, all of them in
one line (the `harnessbandit` logger, a warning; not repeated in worker processes, which
inherit `TOLD_VAR`).
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


def shadows() -> list[tuple[str, str, Path]]:
    """(package, how, where) per package whose import would not (or did not) come from `ROOT`:
    how = "imported" (a module of its name imported from `where`) or "found" (the folder
    `where`, earlier on `sys.path`)."""
    out = []
    for name in PACKAGES:
        module = sys.modules.get(name)
        if module is not None:
            where = _imported_from(module)
            if where is not None and where != _home(name):
                out.append((name, "imported", where))
            continue
        where = _where(importlib.machinery.PathFinder.find_spec(name))
        if where is not None and where != _home(name):
            out.append((name, "found", where))
    return out


def _and(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def shadow_line(found: list[tuple[str, str, Path]]) -> str:
    """The one line that names every shadowing folder of `shadows()`' answer."""
    parts = [f"{name!r} was imported from {where}, not from the installed package {_home(name)}: a folder of yours has "
             "its name; rename it (or start Python in another folder) and use `from harnessbandit import ...`"
             for name, how, where in found if how == "imported"]
    folders = [(name, where) for name, how, where in found if how == "found"]
    if folders:
        one, names = len(folders) == 1, [name for name, _ in folders]
        parts.append(f"your {_and([str(where) for _, where in folders])} {'has the name' if one else 'have the names'} "
                     f"of harnessbandit's package{'' if one else 's'} {_and([repr(n) for n in names])}; harnessbandit "
                     f"imports its own ({_and([str(_home(n)) for n in names])}), so {_and([f'`import {n}`' for n in names])} "
                     f"{'gives' if one else 'give'} harnessbandit's here: rename yours to import {'it' if one else 'them'}")
    return "harnessbandit: " + "; ".join(parts)


def pin() -> None:
    """Install the finder once and say, in one line, once per package and process tree, what shadows one."""
    if not any(isinstance(f, PinnedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, PinnedFinder())
    if multiprocessing.parent_process() is not None:    # a worker: its parent said it already
        return
    told = set(filter(None, os.environ.get(TOLD_VAR, "").split(",")))   # a parent process said these
    new = [found for found in shadows() if found[0] not in told]
    if new:
        LOG.warning(shadow_line(new))
        told |= {name for name, _, _ in new}
    if told:
        os.environ[TOLD_VAR] = ",".join(sorted(told))   # inherited: a forkserver or worker says nothing again
