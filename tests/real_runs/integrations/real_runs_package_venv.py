"""One home for the real-package tests' separate environments (verl 0.7.1, verl 0.9.1, skyrl
0.4.0: each needs pins that cannot share .venv), built by `make venv-verl`, `make venv-verl09`,
`make venv-skyrl` (scripts/trainer_venv.sh): the environment's python (on CI a missing one
fails the test; elsewhere it skips, saying how to build it), a driver run in it as a subprocess,
and the driver's result file."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def venv_python(env_var: str, default: str, target: str, what: str) -> str:
    venv = Path(os.environ.get(env_var, ROOT / default))
    python = venv / "bin" / "python"
    if not (python.exists() and (venv / ".installed").exists()):
        if os.environ.get("CI"):
            pytest.fail(f"{venv} is missing or unfinished on CI: `make {target}` builds it (make test runs it first)")
        pytest.skip(f"no {venv}: `make {target}` builds it ({what})")
    return str(python)


def run_driver(python: str, driver: Path, out: Path, *args, timeout: float | None = None) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{driver.parent}", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "RAY_DEDUP_LOGS": "0"}
    return subprocess.run([python, str(driver), str(out), *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def driver_result(out: Path, proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr[-4000:]
    (path,) = out.glob("result-*.json")
    data = json.loads(path.read_text())
    path.unlink()
    return data
