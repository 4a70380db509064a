"""The layer rule of docs/ARCHITECTURE.md, read from the source: every import of every
module (top-level, inside functions, `importlib.import_module("...")` with a literal name)
is an arrow between packages, and none may point up:

    policies  <-  hbsim  <-  ablations, real_runs, reports
    reports imports hbsim and policies only; real_runs imports neither ablations nor reports;
    ablations may import anything.

and no module imports itself back through others: the modules form no circle, counting
every import at any depth (an import inside a function is still an arrow). `from pkg import
name` is an arrow to `pkg.name` when that is a module (the submodule), else to `pkg`.

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


def _resolve(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of a `from ... import` (relative ones against `package`)."""
    if not node.level:
        return node.module
    base = package.split(".")[:len(package.split(".")) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, at any depth; relative
    imports are resolved against `package` (dotted: the package the module is in)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            found.append((node.lineno, _resolve(node, package)))
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


def module_name(rel: str) -> str:
    """`hbsim/envs/base.py` -> `hbsim.envs.base`; a package's `__init__.py` -> the package."""
    name = rel[:-len(".py")].replace("/", ".")
    return name[:-len(".__init__")] if name.endswith(".__init__") else name


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of this repository it imports (at any depth in its source)."""
    files = {module_name(rel): (package, path) for rel, package, path in _modules()}
    graph = {}
    for name, (package, path) in files.items():
        if path.name == "__init__.py":
            package = name               # relative imports of a package resolve against it
        tree, targets = ast.parse(path.read_text()), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(node, package)
                subs = {f"{base}.{alias.name}" for alias in node.names} & files.keys()
                targets |= subs or ({base} & files.keys())
        for _, imported in imported_modules(path.read_text(), package):
            if not any(t == imported or t.startswith(imported + ".") for t in targets):
                targets |= {imported} & files.keys()
        graph[name] = targets - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other through a chain (a strongly connected
    component of more than one module; Tarjan's algorithm, iterative), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return sorted(found)


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


def test_the_circle_finder_sees_a_circle_through_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": {"e"}, "f": set()}
    assert circles(graph) == [["a", "b", "c"], ["e", "e2"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_submodules_and_lazy_imports():
    graph = import_graph()
    assert "hbsim.contract" in graph["hbsim.records"]            # a module-level import
    assert "real_runs.streams" in graph["real_runs.world.pool"]   # `from real_runs import streams`: the submodule
    assert "real_runs" not in graph["real_runs.world.pool"]
    lazy = [name for name, targets in graph.items() if "reports.offload" in targets]
    assert lazy, "some module imports reports.offload"


def test_no_module_circle_in_any_package():
    found = circles(import_graph())
    assert not found, ("modules that import each other (a circle, imports inside functions counted; "
                       "move the idea both need into a module of its own):\n"
                       + "\n".join(" <-> ".join(group) for group in found))
