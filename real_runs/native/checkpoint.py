"""Checkpoints of a real run: everything needed to continue bit for bit.

A checkpoint is one torch file holding the resolved run config and the loop's
`state_dict` -- the policy's state (its RNG included), the adapter's state (model,
optimizer, frozen reference, leftover buffers, task pools and every generator), the step
and the rows recorded so far. It is written to a temporary file and renamed into place,
so a run killed while saving keeps its previous checkpoint.
"""
from __future__ import annotations

from pathlib import Path

import torch

from hbsim.contract import CHECKPOINT
from hbsim.contract.atomic import atomic_write
from policies.errors import UserError

FORMAT = 2      # 2: the adapter saves its TaskPool state (format 1 checkpoints do not resume)


def save(run_dir, config: dict, loop_state: dict) -> Path:
    """Atomically write `run_dir/checkpoints/last.pt`; returns its path."""
    path = Path(run_dir) / CHECKPOINT
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write(path, lambda tmp: torch.save({"format": FORMAT, "config": config, "loop": loop_state}, tmp))


def load(run_dir) -> dict | None:
    """The checkpoint of `run_dir` ({"format", "config", "loop"}), or None if there is none."""
    path = Path(run_dir) / CHECKPOINT
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - truncated, not a torch file, unpickling errors of any kind
        first = str(exc).splitlines()[0][:160] if str(exc) else ""
        raise UserError(f"checkpoint {path} is not readable ({type(exc).__name__}: {first}); it is corrupt: "
                        "start a new run in another --out") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        state = state if isinstance(state, dict) else {}
        raise UserError(f"checkpoint {path} has format={state.get('format')!r}; this version reads {FORMAT}")
    return state
