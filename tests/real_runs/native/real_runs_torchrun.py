"""Run a test's worker script on two CPU ranks with `torch.distributed.run` (gloo), on a free
local port; the worker writes its answer into `out` (the DDP and the FSDP2 sketch tests)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: Path, out: Path, nproc: int = 2, timeout: float | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc), "--master_addr",
           "127.0.0.1", "--master_port", str(free_port()), str(script), str(out)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
