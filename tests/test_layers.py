"""The layer rule of docs/ARCHITECTURE.md, read from the source: every import of every
module (top-level, inside functions, `importlib.import_module("...")` with a literal name)
is an arrow between packages, and none may point up:

    policies  <-  hbsim  <-  ablations, real_runs, reports
    reports imports hbsim and policies only; real_runs imports neither ablations nor reports;
    ablations may import anything.

The `hb` dispatcher's registry (hbsim/cli.py) names its subcommand modules as strings,
imported with a computed name: not an import, so it is allowed by construction.
"""
from __future__ import annotations

import ast
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("policies", "hbsim", "ablations", "real_runs", "reports")
#: package -> the packages of this repository it must not import
FORBIDDEN = {
    "policies": {"hbsim", "ablations", "real_runs", "reports"},
    "hbsim": {"ablations", "real_runs", "reports"},
    "reports": {"ablations", "real_runs"},
    "real_runs": {"ablations", "reports"},
    "ablations": set(),
}


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, at any depth; relative
    imports are resolved against `package` (dotted: the package the module is in)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            found.append((node.lineno, name))
        elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and _is_import_call(node.func)):
            found.append((node.lineno, node.args[0].value))
    return found


def _is_import_call(func: ast.expr) -> bool:
    return ((isinstance(func, ast.Attribute) and func.attr == "import_module")
            or (isinstance(func, ast.Name) and func.id in ("import_module", "__import__")))


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT)
            yield rel.as_posix(), ".".join(rel.parent.parts), path


def forbidden_arrows() -> list[tuple[str, int, str]]:
    """(file, line, imported module) of every import that points up a layer."""
    bad = []
    for rel, package, path in _modules():
        own = rel.split("/")[0]
        for line, name in imported_modules(path.read_text(), package):
            if name.split(".")[0] in FORBIDDEN[own]:
                bad.append((rel, line, name))
    return bad


def test_the_checker_sees_lazy_relative_and_computed_imports():
    source = ("import os\nfrom . import load\nfrom .. import contract\n"
              "def f():\n    from ablations.collect import collect\n    import real_runs.cli\n"
              "    importlib.import_module('reports.validity')\n    importlib.import_module(name)\n")
    found = imported_modules(source, "hbsim.envs")
    assert sorted(found) == [(1, "os"), (2, "hbsim.envs"), (3, "hbsim"), (5, "ablations.collect"),
                             (6, "real_runs.cli"), (7, "reports.validity")]


def test_the_packages_are_all_read():
    files = {rel for rel, _, _ in _modules()}
    assert {"policies/validate.py", "hbsim/contract.py", "hbsim/folders.py", "reports/cli.py",
            "ablations/store.py", "real_runs/cli.py", "hbsim/envs/base.py"} <= files
    assert len(files) > 60


def test_no_package_imports_one_above_it():
    arrows = forbidden_arrows()
    bad = [f"{rel}:{line} imports {name}" for rel, line, name in arrows]
    assert not bad, "imports against the layer rule (docs/ARCHITECTURE.md):\n" + "\n".join(bad)
