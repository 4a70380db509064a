"""What-if probes (`--counterfactual [EVERY]`): does L, T or the fused score predict the true
gain of training on a harness?

Every `every`-th step, before the policy is asked, `Probe` saves the policy and adapter
state and, for every training harness h, takes a PURE step on h from that same state and
the same random streams (the adapter's streams are part of its state), records what the
policy would observe and what the step is truly worth, and restores both states exactly
(`state_dict` round trips, SPEC §5/§6), so the run itself is unchanged bit for bit.

One row per (step, harness) -- `counterfactual.parquet` (SPEC §7):

    run_id, policy, seed, step        the train row whose pre-step state was probed
    harness, arm                      the probed harness (name, index)
    prob                              the policy's probability of h for this step
    learnability                      observed raw L of the what-if batch
    t_grad, t_update                  T (SPEC §2.5) of the what-if gradient / update sketch
                                      against the probe's memories (below)
    t_policy                          the policy's own raw T after its update (its memories;
                                      NaN for policies without T)
    l_norm, t_norm, score, q          the policy's normalised L, T, fused S and Q_h after its
                                      update with the what-if feedback (NaN without scores)
    gain_train                        true expected one-step gain on the training objective
                                      (mean success, training tasks x training harnesses)
    gain_heldout_tasks                ... on the held-out tasks x training harnesses
    gain_heldout_harness              ... on the held-out tasks on the held-out harness
    real_train, real_heldout_tasks, real_heldout_harness
                                      the realised change of the same means over the what-if
                                      step (sampling noise and drift included)
    true_t                            mean over the other training harnesses j of
                                      cos(d_h, d_j), d = the env's true expected gradient
                                      direction (`true_directions`): what T estimates
    cos_<harness>                     cos(d_h, d_j) for every training harness j and the
                                      held-out harness (NaN where the env has no direction)

T is computed with the policies' own signal code (`policies.signals.transfer_and_update`,
the cosine of the unit sketch with the OTHER harnesses' memories, before the memory's
update) against memories the probe keeps itself, one bank per sketch kind: after each
probed step every harness's what-if sketch enters its memory (EMA rate `eta`, the policy's
when it has one, else SPEC's 0.3). So T is defined for every policy, mixed batches
included; `t_policy` is T against the policy's own memories.

Limits: the probe's rows and memories are not part of `Loop.state_dict()`, so a run
paused and resumed from a checkpoint keeps only the probes after the resume. The expected
gains leave out what the envs' one-step oracles leave out (drift, the staleness of leftover
groups); the `real_*` columns include them.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from hbsim.adapter import float_or_nan, step_feedback
from hbsim.envs.base import TARGETS, target_means  # noqa: F401  (TARGETS: part of this module's API)
from hbsim.run_knobs import RUN_KNOBS
from policies import Allocation
from policies.signals import MemoryBank, as_float_sketch, sketch_norm, transfer_and_update
from policies.errors import UserError

def cosine_matrix(directions: np.ndarray) -> np.ndarray:
    """directions (K, D) -> (K, K) cosines; NaN for a zero direction."""
    norms = np.linalg.norm(directions, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        unit = directions / norms[:, None]
    cos = unit @ unit.T
    cos[~np.isfinite(cos)] = np.nan
    return cos


def transfer_against(bank: MemoryBank | None, arm: int, sketch, eta: float, step: int) -> float:
    """T of `sketch` on `arm` against a COPY of `bank` (the bank is unchanged); NaN when
    there is no sketch or no other memory."""
    if bank is None or sketch is None:
        return float("nan")
    probe = MemoryBank.from_state(bank.state())
    return transfer_and_update(probe, arm, as_float_sketch(sketch), eta, step)[0]


class Probe:
    """Loop hook (hbsim.loop.Loop.hooks): the what-if probe every `every`-th step."""

    def __init__(self, every: int = 1):
        every = RUN_KNOBS["counterfactual"].check("counterfactual", every)    # the run knob's parse
        if every is None:
            raise UserError("counterfactual=None is not allowed here: expected an integer >= 1 (probe every k-th step)")
        self.every = every
        self.banks: dict[str, MemoryBank | None] = {"grad": None, "update": None}
        self.rows: list[dict] = []

    def __call__(self, loop) -> None:
        step = loop.t + 1
        if step % self.every:
            return
        policy, adapter = loop.policy, loop.adapter
        H, B = len(loop.harnesses), loop.batch_groups
        self.n_arms = H
        eta = float(getattr(policy, "eta", 0.3))
        prob = np.asarray(policy.probabilities(), dtype=np.float64)
        q_before = np.asarray(policy.diagnostics().get("Q", np.full(H, np.nan)), dtype=np.float64)
        truth = self._truth(adapter, H, B)
        p_state, a_state = policy.state_dict(), adapter.state_dict()
        sketches: dict[str, list] = {"grad": [], "update": []}
        try:
            for h in range(H):
                adapter.load_state_dict(a_state)
                policy.load_state_dict(p_state)
                before = adapter.success_matrix().copy()
                pure = Allocation.pure(h, H, B)
                res = adapter.train_step(pure)
                after = adapter.success_matrix()
                policy.update(step_feedback(pure, res))
                diag = policy.diagnostics()
                real = (target_means(after, adapter.n_tasks, H) - target_means(before, adapter.n_tasks, H))
                sketches["grad"].append(res.sketch)
                sketches["update"].append(res.update_sketch)
                row = {"policy": loop.label, "seed": loop.seed, "step": step, "harness": loop.harnesses[h],
                       "arm": h, "prob": float(prob[h]), "q_before": float(q_before[h]),
                       "learnability": float_or_nan(res.learnability),
                       "t_grad": transfer_against(self.banks["grad"], h, res.sketch, eta, step),
                       "t_update": transfer_against(self.banks["update"], h, res.update_sketch, eta, step),
                       "t_policy": float_or_nan(diag.get("transfer")), "l_norm": float_or_nan(diag.get("l_norm")),
                       "t_norm": float_or_nan(diag.get("t_norm")), "score": float_or_nan(diag.get("score")),
                       "q": float(np.asarray(diag.get("Q", np.full(H, np.nan)))[h])}
                row.update({f"gain_{t}": float(truth["gains"][h, i]) for i, t in enumerate(TARGETS)})
                row.update({f"real_{t}": float(real[i]) for i, t in enumerate(TARGETS)})
                row.update(truth["cos"][h])
                self.rows.append(row)
        finally:
            adapter.load_state_dict(a_state)
            policy.load_state_dict(p_state)
        for kind, items in sketches.items():
            for h, sketch in enumerate(items):
                self._remember(kind, h, sketch, eta, step)

    def _truth(self, adapter, H: int, B: int) -> dict:
        """Expected target gains (H, 3) of the pure steps and the true cosine columns per harness."""
        current = target_means(adapter.success_matrix(), adapter.n_tasks, H)
        expected = target_means(adapter.expected_success(np.eye(H, dtype=np.int64) * B), adapter.n_tasks, H)
        dirs = adapter.true_directions()                                   # (H or H+1, D)
        cos = cosine_matrix(dirs)
        names = list(adapter.harnesses) + [adapter.heldout_harness]
        rows = []
        for h in range(H):
            others = [cos[h, j] for j in range(H) if j != h and np.isfinite(cos[h, j])]
            row = {"true_t": float(np.mean(others)) if others else float("nan")}
            row.update({f"cos_{name}": float(cos[h, j]) if j < len(dirs) else float("nan")
                        for j, name in enumerate(names)})
            rows.append(row)
        return {"gains": expected - current[None, :], "cos": rows}

    def _remember(self, kind: str, arm: int, sketch, eta: float, step: int) -> None:
        if sketch is None or not math.isfinite(sketch_norm(sketch)):
            return
        sketch = as_float_sketch(sketch)
        if self.banks[kind] is None:
            self.banks[kind] = MemoryBank(self.n_arms, sketch.shape[0], sketch.dtype)
        transfer_and_update(self.banks[kind], arm, sketch, eta, step)

    def frame(self, run_id: str = "") -> pd.DataFrame:
        """The rows so far, `run_id` first (empty frame with the key columns when none)."""
        frame = pd.DataFrame(self.rows) if self.rows else pd.DataFrame(
            columns=["policy", "seed", "step", "harness", "arm"])
        frame.insert(0, "run_id", run_id)
        return frame
