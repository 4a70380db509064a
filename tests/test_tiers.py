"""The suite's own rules (tests/conftest.py): one tier per test, no spawned process outside
`slow`, torch and TRL imported only by the torch tier's files."""
import ast
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

import conftest
from conftest import COLLECTED, TIERS, TORCH_FILES, TORCH_MODULES, SpawnedProcess

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("policies", "hbsim", "ablations", "real_runs", "reports")


def test_an_unmarked_test_cannot_start_python_or_a_worker():
    with pytest.raises(SpawnedProcess, match="test_tiers.py::.* starts a process .*mark it @pytest.mark.slow"):
        subprocess.run([sys.executable, "-c", "pass"])
    with pytest.raises(SpawnedProcess, match="starts a (process|multiprocessing server|forked process)"):
        multiprocessing.get_context("spawn").Process(target=print).start()
    assert subprocess.run(["true"]).returncode == 0      # other programs (matplotlib's fc-list probe) run


@pytest.mark.slow
def test_a_slow_test_may():
    assert subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout == "42\n"


def test_every_test_has_exactly_one_tier(request):
    items = request.session.items
    assert items and all(sum(bool(item.get_closest_marker(t)) for t in TIERS) == 1 for item in items)
    assert request.node.get_closest_marker("unit")                   # in memory, not a CLI file: unit
    for item in items:
        if item.path.name in TORCH_FILES:
            assert item.get_closest_marker("torch"), item.nodeid


@pytest.mark.parametrize("markexpr, collects", [
    ("unit", False), ("calibration", False), ("cli", False), ("not torch", False), ("unit and slow", False),
    ("torch", True), ("not slow", True), ("slow", True), ("torch and not slow", True), ("unit or torch", True),
    ("not unit", True), ("benchmark", True)])
def test_a_torch_file_is_collected_only_when_the_marker_expression_can_select_the_torch_tier(markexpr, collects):
    assert conftest._may_select(markexpr, "torch") == collects


def _module_level_imports(path: Path, module: str) -> set:
    """Absolute names imported when `path` (module `module`) is executed: imports outside
    function bodies, `from a import b` also as a.b, and pytest.importorskip("name")."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()

    def visit(node):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1] + [node.module or ""]) if node.level else node.module
            base = base.strip(".")
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "importorskip"
              and node.args and isinstance(node.args[0], ast.Constant)):
            found.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child)
    visit(ast.parse(path.read_text()))
    return found


def _import_graph() -> dict:
    """module name -> its module-level imports, for the packages and the tests' modules (by file stem)."""
    graph = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            graph[name] = _module_level_imports(path, name)
    for path in (ROOT / "tests").rglob("*.py"):
        graph[path.stem] = _module_level_imports(path, path.stem)
    return graph


def _loads_torch(graph: dict, name: str, seen: set) -> bool:
    """Whether importing `name` executes an import of torch/TRL (its parent packages included)."""
    if name.split(".")[0] in TORCH_MODULES:
        return True
    if name in seen:
        return False
    seen.add(name)
    parts = name.split(".")
    parents = [".".join(parts[:i]) for i in range(1, len(parts))]
    return any(_loads_torch(graph, m, seen) for m in parents + sorted(graph.get(name, ())) if m in graph
               or m.split(".")[0] in TORCH_MODULES)


def test_only_the_torch_files_import_torch_or_trl_at_module_level():
    """A test file outside conftest.TORCH_FILES that imports torch/TRL/transformers when it is
    collected (itself, or through a module of ours that does at its top level) would make
    `pytest -m unit` import them; a torch file that stopped importing them leaves the list."""
    graph = _import_graph()
    test_files = {p.name: p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    assert TORCH_FILES <= set(test_files), sorted(TORCH_FILES - set(test_files))
    loading = {name for name, stem in test_files.items() if _loads_torch(graph, stem, set())}
    assert loading == TORCH_FILES, (f"import torch only inside the tests of: {sorted(loading - TORCH_FILES)}; "
                                    f"no longer torch files: {sorted(TORCH_FILES - loading)}")


def test_collecting_without_the_torch_files_imports_neither_torch_nor_trl(request):
    """`pytest -m unit` (or any run whose -m rules the torch tier out) skips the torch files, and
    collecting the rest loads none of TORCH_MODULES; in a run with the torch files it holds trivially."""
    torch_files, loaded = request.config.stash[COLLECTED]
    assert torch_files or not loaded, f"collecting no torch file imported {loaded}"


def test_the_longest_files_named_first_exist():
    """conftest.LONGEST_FIRST orders the workers' files by measured time: a renamed file would
    drop out of the order unnoticed."""
    files = {p.name for p in (ROOT / "tests").rglob("test_*.py")}
    assert set(conftest.LONGEST_FIRST) <= files, sorted(set(conftest.LONGEST_FIRST) - files)
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)
