"""The layer rule of docs/ARCHITECTURE.md, read from the source: every import of every
module (top-level, inside functions, `importlib.import_module("...")` with a literal name)
is an arrow between packages, and none may point up:

    policies  <-  hbsim  <-  ablations, real_runs, reports  <-  scripts
    reports imports policies and, of hbsim, only the data contract (hbsim.contract.*);
    real_runs imports neither ablations nor reports; ablations may import anything;
    scripts/ is checked like a package: it may import every package, and no package
    imports a script (neither by name nor by file path).

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
PACKAGES = ("policies", "hbsim", "ablations", "real_runs", "reports", "scripts")
#: package -> the packages of this repository it must not import
FORBIDDEN = {
    "policies": {"hbsim", "ablations", "real_runs", "reports", "scripts"},
    "hbsim": {"ablations", "real_runs", "reports", "scripts"},
    "reports": {"ablations", "real_runs", "scripts"},
    "real_runs": {"ablations", "reports", "scripts"},
    "ablations": {"scripts"},
    "scripts": set(),
}
#: package -> the only modules (and their submodules) of a package below it that it may import
ONLY = {"reports": {"hbsim": ("hbsim.contract",)}}


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
            top = name.split(".")[0]
            allowed = ONLY.get(own, {}).get(top)
            if top in FORBIDDEN[own] or (allowed is not None and not any(
                    name == a or name.startswith(a + ".") for a in allowed)):
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
    assert {"policies/validate.py", "hbsim/contract/names.py", "hbsim/contract/folders.py", "reports/cli.py",
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
    assert "hbsim.contract" in graph["hbsim.contract.records"]            # a module-level import
    assert "real_runs.streams" in graph["real_runs.world.pool"]   # `from real_runs import streams`: the submodule
    assert "real_runs" not in graph["real_runs.world.pool"]
    lazy = [name for name, targets in graph.items() if "reports.offload" in targets]
    assert lazy, "some module imports reports.offload"


def test_no_module_circle_in_any_package():
    found = circles(import_graph())
    assert not found, ("modules that import each other (a circle, imports inside functions counted; "
                       "move the idea both need into a module of its own):\n"
                       + "\n".join(" <-> ".join(group) for group in found))


def test_reports_may_import_only_the_data_contract_of_hbsim():
    """The rule itself, on a made-up module: hbsim.contract.* passes, any other hbsim module fails."""
    source = "from hbsim.contract import TRAIN_FILE\nfrom hbsim.contract.atomic import atomic_write\n"
    assert all(name.startswith("hbsim.contract") for _, name in imported_modules(source, "reports"))
    allowed = ONLY["reports"]["hbsim"]
    for name, ok in (("hbsim.contract", True), ("hbsim.contract.labels", True), ("hbsim.contractx", False),
                     ("hbsim.envs.base", False), ("hbsim", False)):
        assert any(name == a or name.startswith(a + ".") for a in allowed) is ok, name


# -- one home per idiom ------------------------------------------------------------------------
#: idiom -> (the regular expression of its hand-written form, the one file that may hold it, the
#: files that hold the same characters for another purpose, each with its reason)
IDIOMS = {
    "an interval's quantiles (use reports.readings.intervals)": (
        r"\b(np|numpy)\.quantile\(", "reports/readings/intervals.py",
        {"hbsim/twin/worlds.py": "a world's feature quantiles, not an interval",
         "reports/validity.py": "the bin edges of a calibration table, not an interval",
         "ablations/twin_check.py": "the critical value of Kendall's tau under random rankings, not an interval"}),
    "a label's part parse (use hbsim.contract.labels)": (
        r"""["'(]\\?\[part=|\[\{PART\}=""", "hbsim/contract/labels.py", {}),
    "a comma-list parse (use policies.validate.comma_items)": (
        r"""\.split\((",|',)""", "policies/validate.py",
        {"real_runs/world/syntax.py": "a tool call's argument syntax, not a knob"}),
    "a JSON record read without its shape (use hbsim.contract.shapes.read_record)": (
        r"json\.loads?\([^\n]*read_text\(", "hbsim/contract/shapes.py", {}),
}


def idiom_homes() -> list[str]:
    """`file:line: idiom` of every hand-written idiom outside its one home (`IDIOMS`)."""
    import re
    bad = []
    for rel, _, path in _modules():
        text = path.read_text()
        for idiom, (pattern, home, elsewhere) in IDIOMS.items():
            if rel == home or rel in elsewhere:
                continue
            for match in re.finditer(pattern, text):
                bad.append(f"{rel}:{text.count(chr(10), 0, match.start()) + 1}: {idiom}")
    return bad


def test_each_idiom_has_one_home():
    bad = idiom_homes()
    assert not bad, "a second home of an idiom that has one:\n" + "\n".join(bad)


def test_the_idiom_finder_sees_each_second_home(tmp_path, monkeypatch):
    """Each pattern fails on its hand-written form (so the check above can fail)."""
    import re
    samples = {"an interval's": "lo, hi = np.quantile(x, [0.025, 0.975])",
               "a label's": 'name = re.sub(r"\\[part=[^\\]]*\\]$", "", label)',
               "a comma-list": 'items = [s.strip() for s in value.split(",")]',
               "a JSON record": "record = json.loads(path.read_text())"}
    for idiom, (pattern, _, _) in IDIOMS.items():
        sample = next(s for k, s in samples.items() if idiom.startswith(k))
        assert re.search(pattern, sample), idiom
    assert not re.search(IDIOMS[next(iter(IDIOMS))][0], "intervals.percentile_interval(means, level)")


def test_no_package_loads_a_script_by_file_path():
    bad = [f"{rel}:{text.count(chr(10), 0, text.index('spec_from_file_location')) + 1}"
           for rel, _, path in _modules() if not rel.startswith("scripts/")
           and "spec_from_file_location" in (text := path.read_text())]
    assert not bad, "a package loads a module by file path (import it by name):\n" + "\n".join(bad)
