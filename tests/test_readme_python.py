"""The README's Python quick start runs as shown: its ```python block(s), read from README.md
(so the test fails when the README drifts), run verbatim in a fresh interpreter in an empty
folder, print the DataFrames and the sentences the README promises."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def readme_python() -> str:
    blocks = PYTHON_BLOCK.findall((ROOT / "README.md").read_text())
    assert blocks, "README.md shows no ```python block"
    return "\n".join(blocks)


def test_the_quick_start_imports_only_from_harnessbandit_and_stays_short():
    code = readme_python()
    imports = re.findall(r"^(?:from (\S+) import|import (\S+))", code, re.M)
    assert {a or b for a, b in imports} == {"pandas", "harnessbandit"}
    assert len([line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]) <= 14


@pytest.mark.slow
def test_the_readme_python_block_runs_verbatim(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", readme_python()], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    # summarize: a DataFrame, one row per policy
    assert re.match(r"^\s+policy\s+seeds\b", out[0]) and re.match(r"^0\s+harnessbandit\s+4\b", out[1]) \
        and re.match(r"^1\s+uniform\s+4\b", out[2]), out[:3]
    sentences = [line for line in out if line.startswith("On ")]
    assert len(sentences) == 2 and all("over the baseline uniform" in s and "Holm's correction over 2 comparisons"
                                       in s for s in sentences), sentences
    # headline_frame: one row per suite x candidate
    head = out.index(next(line for line in out if re.match(r"^\s+suite\s+metric\b", line)))
    assert re.match(r"^0\s+heldout_harness\s+pass@1\b", out[head + 1]) and \
        re.match(r"^1\s+heldout_tasks\s+pass@1\b", out[head + 2]), out[head:head + 3]
    assert os.listdir(tmp_path) == []                    # computed in memory: nothing written


#: the distribution's packages a user's code reaches through `harnessbandit` (a folder of the user's
#: own may carry their names); `real_runs.integrations` is the public home of the trainers' classes
THROUGH_HARNESSBANDIT = ("policies", "reports", "hbsim", "ablations")
#: the page of the packages' internal interfaces, for developers of hb itself
INTERNALS = "ARCHITECTURE.md"


def python_blocks(page: Path) -> list[str]:
    return PYTHON_BLOCK.findall(page.read_text())


def test_user_pages_import_the_public_api_from_harnessbandit():
    """The README's and the docs' Python (the internals page aside) imports policies, reports,
    hbsim and ablations only through `harnessbandit`, and every name it imports from there exists."""
    import harnessbandit
    pages = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != INTERNALS)]
    direct = re.compile(rf"^\s*(?:from|import)\s+({'|'.join(THROUGH_HARNESSBANDIT)})\b"
                        rf"|\b({'|'.join(THROUGH_HARNESSBANDIT)})\.[a-z_]+\(", re.M)
    wrong, missing, used = [], [], 0
    for page in pages:
        for block in python_blocks(page):
            wrong += [f"{page.name}: {m.group(0).strip()}" for m in direct.finditer(block)]
            for names in re.findall(r"^from harnessbandit import (.+)$", block, re.M):
                used += 1
                missing += [f"{page.name}: {n}" for n in re.split(r",\s*", names.strip()) if n not in harnessbandit.EXPORTS]
    assert wrong == [] and missing == [], (wrong, missing)
    assert used >= 4          # README, EXTENDING.md, POLICIES.md, REAL_RUNS.md
