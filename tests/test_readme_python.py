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
