"""Helpers shared by the ablations tests (imported by name; not a test module)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: a small bernoulli env, so every cell runs in a fraction of a second
TINY_ENV = {"kind": "bernoulli", "n_harnesses": 3, "n_tasks": 12, "n_heldout_tasks": 4, "k_attempts": 2}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return repr(v)


def grid_text(name="g", steps=6, seeds=2, policies=None, sweep=None, env=None, eval_every=None,
              plugins=None, top_extra=None) -> str:
    lines = [f"name = {toml_value(name)}", f"steps = {steps}", f"seeds = {toml_value(seeds)}"]
    if eval_every is not None:
        lines.append(f"eval_every = {eval_every}")
    if plugins:
        lines.append(f"plugins = {toml_value(plugins)}")
    for k, v in (top_extra or {}).items():
        lines.append(f"{k} = {toml_value(v)}")
    lines.append("[env]")
    lines += [f"{k} = {toml_value(v)}" for k, v in (env or TINY_ENV).items()]
    for pol in policies or [{"name": "uniform"}, {"name": "harnessbandit", "warmup_rounds": 1}]:
        lines.append("[[policies]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in pol.items()]
    if sweep:
        lines.append("[sweep]")
        lines += [f'"{k}" = {toml_value(v)}' for k, v in sweep.items()]
    return "\n".join(lines) + "\n"


def study_text(steps=3, seeds=2) -> str:
    """A one-env validity study (`hb validity --study`) on the tiny bernoulli world."""
    return (f'steps = {steps}\nseeds = {seeds}\nenvs = ["bernoulli"]\n[env]\nn_tasks = 12\nn_heldout_tasks = 4\n'
            '[[policies]]\nname = "uniform"\n')


def write_grid(path: Path, **kw) -> Path:
    path.write_text(grid_text(**kw))
    return path


def env_with_plugin_path() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO), env.get("PYTHONPATH", "")])
    env.pop("HB_DEBUG", None)
    return env


def hb(*args, check=None, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    """Run `python -m hbsim.cli ARGS` in a subprocess (test plugins importable; `env`: extra
    variables)."""
    proc = subprocess.run([sys.executable, "-m", "hbsim.cli", *map(str, args)], capture_output=True,
                          text=True, env={**env_with_plugin_path(), **(env or {})}, cwd=REPO, **kw)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def without_wall_clock(df: pd.DataFrame) -> pd.DataFrame:
    """Drop the measured wall-clock columns (seconds_*), the only non-deterministic ones."""
    return df[[c for c in df.columns if not c.startswith("seconds_")]]


def snapshot(root: Path) -> dict:
    """path -> (size, mtime_ns) of everything under root (to prove nothing changed)."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}
