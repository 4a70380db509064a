"""`harnessbandit`: the public API re-exported from its homes, and the pin that keeps a user's
own folders named like the distribution's packages from shadowing them (harnessbandit/origin.py)."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harnessbandit
from harnessbandit import origin

REPO = Path(__file__).resolve().parent.parent


def test_every_exported_name_is_the_object_of_its_home():
    assert sorted(harnessbandit.__all__) == sorted(harnessbandit.EXPORTS) and len(harnessbandit.EXPORTS) >= 30
    for name, (module, attr) in harnessbandit.EXPORTS.items():
        assert getattr(harnessbandit, name) is getattr(importlib.import_module(module), attr), name
    with pytest.raises(AttributeError, match="no attribute 'nosuch'"):
        harnessbandit.nosuch  # noqa: B018


def test_the_origin_module_is_a_stdlib_leaf():
    """Every package imports harnessbandit.origin first: it may import nothing of the repository."""
    import ast
    tree = ast.parse((REPO / "harnessbandit" / "origin.py").read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not roots & {"harnessbandit", *origin.PACKAGES, "numpy", "pandas"}, roots
    assert origin.PACKAGES == ("policies", "hbsim", "ablations", "real_runs", "reports")
    assert all((origin.ROOT / name / "__init__.py").is_file() for name in origin.PACKAGES)
    assert any(isinstance(f, origin.PinnedFinder) for f in sys.meta_path)


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HB_DEBUG", origin.TOLD_VAR)}
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _user_folder(tmp_path: Path, name: str) -> Path:
    """A user's own package named like one of the distribution's, in the working directory."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "__init__.py").write_text("MINE = True\n")
    return folder


@pytest.mark.slow
def test_a_user_policies_folder_in_the_cwd_is_named_in_one_line_and_changes_nothing(tmp_path):
    folder = _user_folder(tmp_path, "policies")
    # `python -m hbsim.cli` from that folder: sys.path[0] is the cwd, so `policies` was the user's
    done = subprocess.run([sys.executable, "-m", "hbsim.cli", "policies"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", origin.TOLD_VAR)})
    assert done.returncode == 0, done.stderr
    assert "harnessbandit " in done.stdout and "uniform " in done.stdout
    lines = done.stderr.strip().splitlines()
    assert lines == [f"harnessbandit: your {folder} has the name of harnessbandit's package 'policies'; harnessbandit "
                     f"imports its own ({REPO / 'policies'}), so `import policies` gives harnessbandit's here: rename "
                     "yours to import it"], done.stderr
    # two worker processes (and their forkserver) import the packages again: still one line
    done = subprocess.run([sys.executable, "-m", "hbsim.cli", "sim", "--env", "bernoulli", "--policy", "uniform",
                           "--seeds", "4", "--steps", "3", "--jobs", "2"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", origin.TOLD_VAR)})
    assert done.returncode == 0 and done.stderr.count("harnessbandit: your") == 1, done.stderr
    # from harnessbandit import ...: the installed packages, the same one line
    done = _python("from harnessbandit import POLICIES, build_report\nimport policies\n"
                   "print(len(POLICIES) > 10, policies.__file__, hasattr(policies, 'MINE'))", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", str(REPO / "policies" / "__init__.py"), "False"]
    assert len(done.stderr.strip().splitlines()) == 1 and str(folder) in done.stderr


@pytest.mark.slow
def test_a_policies_and_a_reports_folder_are_named_together_in_one_line(tmp_path):
    mine = [_user_folder(tmp_path, "policies"), _user_folder(tmp_path, "reports")]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", origin.TOLD_VAR)}
    done = subprocess.run([sys.executable, "-m", "hbsim.cli", "policies"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=env)
    assert done.returncode == 0 and "uniform " in done.stdout, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"harnessbandit: your {mine[0]} and {mine[1]} have the names of harnessbandit's packages 'policies' and "
        f"'reports'; harnessbandit imports its own ({REPO / 'policies'} and {REPO / 'reports'}), so `import policies` "
        "and `import reports` give harnessbandit's here: rename yours to import them"], done.stderr


@pytest.mark.slow
def test_a_package_imported_from_a_user_folder_first_is_named_in_one_line(tmp_path):
    folder = _user_folder(tmp_path, "reports")
    done = _python("import reports\nimport hbsim\nprint(reports.MINE)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
    assert done.stderr.strip().splitlines() == [
        f"harnessbandit: 'reports' was imported from {folder}, not from the installed package {REPO / 'reports'}: "
        "a folder of yours has its name; rename it (or start Python in another folder) and use "
        "`from harnessbandit import ...`"]


@pytest.mark.slow
def test_without_a_shadowing_folder_nothing_is_said(tmp_path):
    (tmp_path / "notes").mkdir()                        # another folder, and a namespace-style `reports/`
    (tmp_path / "reports").mkdir()                       # (no __init__.py: it never shadows a package)
    done = _python("from harnessbandit import build_report, run_config\nimport reports\nprint(reports.__file__)",
                   tmp_path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.strip() == str(REPO / "reports" / "__init__.py")
