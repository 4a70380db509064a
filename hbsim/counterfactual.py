"""What-if probes (`--counterfactual [EVERY]`): does L, T or the fused score predict the true
gain of training on a harness?

Every `every`-th step, before the policy is asked, `Probe` saves the policy and adapter
state and, for every training harness h, takes a PURE step on h from that same state and
the same random streams (the adapter's streams are part of its state), records what the
policy would observe and what the step is truly worth, and restores both states exactly
(`state_dict` round trips, SPEC §5/§6), so the run itself is unchanged bit for bit.

After the pure steps, a what-if MIXED step (the batch split evenly over every harness,
`policies.mixed.even_split`) from the same state gives one more row, `harness = "mixed"`,
`arm = -1`; the policy is not updated with it (its columns are NaN) and its sketches never
enter the probe's memories, so the pure rows are those of a probe without it.

A real trainer (no ground truth): `gain_*`, `true_t` and `cos_*` are NaN, and `real_*` /
`delta_*` come from its optional `probe_means(step)` (an evaluation of the model before and
after the what-if step on the same random draws); a synthetic env's come from its true
success matrix (`probe_means` below). The adapter's state is deep-copied before the probe
(a trainer's `state_dict` may hold its live tensors).

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
    delta_<harness>                   the realised change of the mean success of the held-out
                                      tasks on that harness (training and held-out harnesses)
    seconds_probe                     wall seconds the probe spent on the row (the first row of a
                                      step also holds the state copy and the measurement before
                                      the what-if steps, the mixed row the final restore): their
                                      sum over a step is the probe's cost; the one column that
                                      differs between two identical runs

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

import copy
import math
import time

import numpy as np
import pandas as pd

from hbsim.adapter import float_or_nan, step_feedback
from hbsim.envs.base import target_means
from policies.clairvoyant import TARGETS
from hbsim.run_knobs import RUN_KNOBS
from policies import Allocation
from policies.base import checked_probabilities
from policies.mixed import even_split
from policies.signals import MemoryBank, as_float_sketch, sketch_norm, transfer_and_update
from policies.errors import UserError

#: the harness column of the mixed probe's row (its arm is -1, as in the train table)
MIXED = "mixed"


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


def transfer_to_all(bank: MemoryBank | None, sketch) -> float:
    """Mean cosine of `sketch` with EVERY harness's existing, non-zero memory in `bank` (the
    mixed probe's T: a mixed batch has no arm of its own); NaN without a sketch or a memory."""
    if bank is None or sketch is None:
        return float("nan")
    g = as_float_sketch(sketch).astype(np.float64)
    g_norm = float(np.linalg.norm(g))
    if not math.isfinite(g_norm) or g_norm == 0.0:
        return float("nan")
    cosines = []
    for h in np.flatnonzero(bank.has):
        m = bank.vector(int(h)).astype(np.float64)
        m_norm = float(np.linalg.norm(m))
        if m_norm > 0:
            cosines.append(float(m @ g) / (m_norm * g_norm))
    value = float(np.mean(cosines)) if cosines else float("nan")
    return value if math.isfinite(value) else float("nan")


def probe_means(adapter, step: int) -> dict[str, float]:
    """What the probe measures before and after a what-if step: the mean success on each
    target (TARGETS) and, per harness (training and held-out), on the held-out tasks. A
    synthetic env: the TRUE success matrix; another adapter: its optional
    `probe_means(step)` (the real trainer: an evaluation of the model on the probe's tasks
    from the random stream of the probed `step`, the same before and after a what-if step,
    NaN where it measures nothing)."""
    own = getattr(adapter, "probe_means", None)
    if callable(own):
        return dict(own(step))
    success = adapter.success_matrix()
    H = len(adapter.harnesses)
    out = {f"real_{t}": float(v) for t, v in zip(TARGETS, target_means(success, adapter.n_tasks, H))}
    names = [*adapter.harnesses, adapter.heldout_harness]
    out.update({f"delta_{name}": float(success[adapter.n_tasks:, j].mean()) for j, name in enumerate(names)})
    return out


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
        prob = checked_probabilities(policy)
        q_before = np.asarray(policy.diagnostics().get("Q", np.full(H, np.nan)), dtype=np.float64)
        mixed = Allocation(even_split(list(range(H)), H, B, loop.t))
        truth = self._truth(adapter, H, B, mixed.counts)
        # a deep copy: a trainer's state_dict may hold its live tensors (torch's model and optimizer)
        start = time.perf_counter()
        p_state, a_state = policy.state_dict(), copy.deepcopy(adapter.state_dict())
        before = probe_means(adapter, step)
        sketches: dict[str, list] = {"grad": [], "update": []}
        try:
            for h in range(H):
                adapter.load_state_dict(a_state)
                policy.load_state_dict(p_state)
                pure = Allocation.pure(h, H, B)
                res = adapter.train_step(pure)
                after = probe_means(adapter, step)
                policy.update(step_feedback(pure, res))
                diag = policy.diagnostics()
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
                row.update({k: after[k] - before[k] for k in before})
                row.update(truth["cos"][h])
                row["seconds_probe"], start = time.perf_counter() - start, time.perf_counter()
                self.rows.append(row)
            mixed_row = self._mixed_row(loop, step, adapter, a_state, mixed, before, truth)
        finally:
            adapter.load_state_dict(a_state)
            policy.load_state_dict(p_state)
        mixed_row["seconds_probe"] = time.perf_counter() - start
        self.rows.append(mixed_row)
        for kind, items in sketches.items():
            for h, sketch in enumerate(items):
                self._remember(kind, h, sketch, eta, step)

    def _mixed_row(self, loop, step: int, adapter, a_state: dict, mixed: Allocation, before: dict,
                   truth: dict) -> dict:
        """The what-if MIXED step (`mixed.even_split` of the batch over every harness) from the
        same state: harness `mixed`, arm -1; the policy is not updated with it (a pure
        policy's update takes one arm), so its columns are NaN."""
        adapter.load_state_dict(a_state)
        res = adapter.train_step(mixed)
        after = probe_means(adapter, step)
        nan = float("nan")
        row = {"policy": loop.label, "seed": loop.seed, "step": step, "harness": MIXED, "arm": -1,
               "prob": nan, "q_before": nan, "learnability": float_or_nan(res.learnability),
               "t_grad": transfer_to_all(self.banks["grad"], res.sketch),
               "t_update": transfer_to_all(self.banks["update"], res.update_sketch),
               "t_policy": nan, "l_norm": nan, "t_norm": nan, "score": nan, "q": nan}
        row.update({f"gain_{t}": float(truth["mixed_gains"][i]) for i, t in enumerate(TARGETS)})
        row.update({k: after[k] - before[k] for k in before})
        row.update({k: nan for k in truth["cos"][0]})
        return row

    def _truth(self, adapter, H: int, B: int, mixed: np.ndarray) -> dict:
        """Expected target gains (H, 3) of the pure steps and (3,) of the mixed one, and the true
        cosine columns per harness; all NaN for an adapter without ground truth (a real run)."""
        names = list(adapter.harnesses) + [getattr(adapter, "heldout_harness", None) or "heldout"]
        if not callable(getattr(adapter, "expected_success", None)):
            nan_cos = {"true_t": float("nan"), **{f"cos_{name}": float("nan") for name in names}}
            return {"gains": np.full((H, len(TARGETS)), np.nan), "mixed_gains": np.full(len(TARGETS), np.nan),
                    "cos": [dict(nan_cos) for _ in range(H)]}
        current = target_means(adapter.success_matrix(), adapter.n_tasks, H)
        expected = target_means(adapter.expected_success(np.eye(H, dtype=np.int64) * B), adapter.n_tasks, H)
        mixed_gains = target_means(adapter.expected_success(np.asarray(mixed)[None, :]), adapter.n_tasks, H)[0]
        dirs = adapter.true_directions()                                   # (H or H+1, D)
        cos = cosine_matrix(dirs)
        rows = []
        for h in range(H):
            others = [cos[h, j] for j in range(H) if j != h and np.isfinite(cos[h, j])]
            row = {"true_t": float(np.mean(others)) if others else float("nan")}
            row.update({f"cos_{name}": float(cos[h, j]) if j < len(dirs) else float("nan")
                        for j, name in enumerate(names)})
            rows.append(row)
        return {"gains": expected - current[None, :], "mixed_gains": mixed_gains - current, "cos": rows}

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
