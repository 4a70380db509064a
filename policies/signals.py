"""Signal maths of the fused scheduler (SPEC §2.5, §3) as pure functions.

Everything here works on plain numpy arrays passed in by the caller; the functions
that update state do so in place on the arrays they are given and say so. No
randomness is used.

* pooled sliding-window min-max normaliser: `window_push`, `window_values`, `minmax_normalise`
* transfer memory (EMA of unit sketches): `sketch_norm`, `transfer_and_update`
* fusions: `FUSIONS` (name -> function of (l_norm, t_norm, alpha) with NaN = missing)
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


# -- Pooled sliding window (one ring buffer per signal, shared by all harnesses) -----------
def window_push(buffer: list[float], count: int, value: float) -> int:
    """Append `value` to the ring `buffer` (a list of capacity W) holding `count` values so far.

    Mutates `buffer` in place; returns the new count. Once more than W values were
    pushed, the oldest is overwritten, so the window holds the W most recent values.
    """
    buffer[count % len(buffer)] = value
    return count + 1


def window_values(buffer: list[float], count: int) -> list[float]:
    """The values currently in the window (order not meaningful): min(count, W) values."""
    return buffer if count >= len(buffer) else buffer[:count]


def minmax_normalise(x: float, values: Sequence[float], degenerate: float = 0.5) -> float:
    """clip((x - min W) / (max W - min W), 0, 1); `degenerate` if |W| < 2 or max == min.

    values: the window AFTER x was appended (SPEC §3 step 3).
    """
    if len(values) < 2:
        return degenerate
    lo, hi = min(values), max(values)
    if hi == lo:
        return degenerate
    return min(1.0, max(0.0, (x - lo) / (hi - lo)))


# -- Transfer memory -----------------------------------------------------------------------
#: Below these sums of squares a float dot product may have lost digits to subnormal
#: (or flushed) squares: the norm is then recomputed on a rescaled float64 copy.
_RELIABLE_SQ = {np.dtype(t): float(np.finfo(t).tiny / np.finfo(t).eps) for t in (np.float32, np.float64)}


def as_float_sketch(sketch) -> np.ndarray:
    """The sketch as a float32 or float64 array; other dtypes (ints, bools, float16, ...)
    are converted to float64, whose products cannot wrap around or lose precision."""
    sketch = np.asarray(sketch)
    if sketch.dtype not in _RELIABLE_SQ:
        sketch = sketch.astype(np.float64)
    return sketch


def sketch_norm(sketch: np.ndarray | None) -> float:
    """||sketch||_2, or NaN when the sketch is absent, empty or not finite.

    One pass (a dot product). A dot that overflows to inf, or whose squares fall in the
    subnormal range, is redone on a rescaled float64 copy, so only genuinely non-finite
    sketches are reported as NaN and only all-zero sketches as 0. (`np.vdot` does not
    raise numpy floating-point warnings, so the hot path needs no `np.errstate` context,
    which costs microseconds per call.)
    """
    if sketch is None:
        return float("nan")
    sketch = as_float_sketch(sketch)
    if sketch.size == 0:
        return float("nan")
    sq = float(np.vdot(sketch, sketch))
    if math.isfinite(sq) and sq >= _RELIABLE_SQ[sketch.dtype]:
        return math.sqrt(sq)
    if not np.isfinite(sketch).all():
        return float("nan")
    big = float(np.abs(sketch).max())
    if big == 0.0:
        return 0.0
    scaled = sketch.astype(np.float64) / big
    return big * math.sqrt(float(np.dot(scaled, scaled)))


#: Rows of the memory bank are allocated in blocks of this many (extra rows stay zero).
#: OpenBLAS's float32 gemv takes 4 rows at a time and, with a second thread, splits 8
#: rows 4 + 4: 6 memories padded to 8 rows cost about what 6 rows do on one core and
#: ~20% less per cycle when a second core is free (README, Performance).
ROW_BLOCK = 4

#: The EMA update adds the raw sketch to a row (see `MemoryBank`), so a row has the
#: magnitude |g|/eta of its arm's recent sketches and its product with a new sketch is
#: at most about |g|^2/eta. A sketch is used raw when 1e-12 < |g| and |g|^2 < 1e30 * eta;
#: otherwise it is divided by its norm first (a rare slow path), so float32 row-sketch
#: products can neither overflow nor underflow.
RAW_MIN_NORM, RAW_MAX_PRODUCT = 1e-12, 1e30

#: Below this eta, rows of magnitude |g|/eta could overflow: the memory is then updated
#: additively instead (rows += c g, scale *= 1 - eta; one temporary vector per update).
SCALED_MIN_ETA = 1e-6

#: A memory whose update cancels to within this many float epsilons of its parts'
#: size is exactly zero (what is left is rounding noise) and so is not compared.
CANCELLED_EPS = 64


def bank_for(bank: "MemoryBank | None", n_arms: int, sketch) -> tuple["MemoryBank", np.ndarray]:
    """(bank, sketch): `sketch` as a float 1-d vector checked against the bank's length,
    and the bank (a new one, of the sketch's length and dtype, when `bank` is None)."""
    sketch = as_float_sketch(sketch)
    if sketch.ndim != 1:
        raise ValueError(f"feedback sketch has shape {sketch.shape}: expected a 1-d vector")
    if bank is None:
        return MemoryBank(n_arms, sketch.shape[0], sketch.dtype), sketch
    if sketch.shape[0] != bank.rows.shape[1]:
        raise ValueError(f"feedback sketch has length {sketch.shape[0]}: expected "
                         f"{bank.rows.shape[1]} (the length of earlier sketches)")
    return bank, sketch


class MemoryBank:
    """The transfer memories m_h (SPEC §2.5) as plain arrays, stored as scaled rows:
    m_h = scale[h] * rows[h], with sq[h] = ||rows[h]||^2.

    An EMA update m' = (1 - eta) m + eta g/|g| is written as
    rows[h] <- k rows[h] + g, scale[h] <- eta/|g|,  k = (1 - eta) scale[h] |g| / eta:
    two in-place passes over one row, no scratch vector, and the new squared norm comes
    from the dot products the transfer computation takes anyway. The scale is reset at
    every update, so it never drifts; rows[h] has the magnitude |g|/eta of arm h's recent
    sketches. For eta < SCALED_MIN_ETA the update is rows[h] += c g, scale[h] *= 1 - eta,
    c = eta / ((1 - eta) scale[h] |g|), with the scale folded back into the row when it
    falls below 1e-8.

    rows: (H, d) float (float32 for float32 sketches; a view of a zero-padded block of
    ROW_BLOCK-multiple rows); scale, sq: (H,) float64; has: (H,) bool; last_update:
    (H,) int64, the (1-based) step of each memory's last update. `norm()` gives ||m_h||.
    """

    def __init__(self, n_arms: int, d: int, dtype=np.float64):
        padded = -(-n_arms // ROW_BLOCK) * ROW_BLOCK
        self.block = np.zeros((padded, d), dtype=dtype)     # rows beyond n_arms stay zero
        self.rows = self.block[:n_arms]
        self.scale = np.ones(n_arms)
        self.sq = np.zeros(n_arms)
        self.has = np.zeros(n_arms, dtype=bool)
        self.last_update = np.zeros(n_arms, dtype=np.int64)

    def norm(self) -> np.ndarray:
        """(H,) ||m_h|| (0 where no memory exists)."""
        return np.where(self.has, self.scale * np.sqrt(self.sq), 0.0)

    def vector(self, h: int) -> np.ndarray:
        """m_h as a new array."""
        return self.rows[h] * self.scale[h]

    def state(self) -> dict:
        return {k: getattr(self, k).copy() for k in ("rows", "scale", "sq", "has", "last_update")}

    @classmethod
    def from_state(cls, state: dict) -> "MemoryBank":
        bank = cls(*state["rows"].shape, dtype=state["rows"].dtype)
        bank.rows[...] = state["rows"]
        for k in ("scale", "sq", "has", "last_update"):
            setattr(bank, k, state[k].copy())
        return bank


def transfer_and_update(bank: MemoryBank, arm: int, sketch: np.ndarray | None, eta: float, step: int,
                        eligible: np.ndarray | None = None, g_norm: float | None = None) -> tuple[float, int]:
    """Transferability of `arm`'s sketch, then the EMA update of its memory (SPEC §2.5).

    bank: the memories, updated IN PLACE for `arm` only. sketch: (d,). eta: EMA rate.
    step: recorded as the memory's last update. eligible: optional (H,) bool of the other
    memories that may be compared (age limits). g_norm: optional precomputed
    `sketch_norm(sketch)`.

    Returns (T, compared): T = mean over j != arm with an existing, non-zero (eligible)
    memory of cos(sketch, m_j), and the number of such memories. T is NaN when none
    exists (compared = 0) or when the cosines were not finite (compared > 0).
    A zero-norm, absent or non-finite sketch gives NaN and leaves the memory untouched.
    m_arm <- unit sketch if it did not exist, else (1 - eta) m_arm + eta * unit sketch.

    T only reads the OTHER memories, so arm's row is updated first and the dot products
    with every row are taken afterwards (one gemv over the bank, which then finds the
    updated row in cache); the updated row's product gives its new norm.
    """
    if g_norm is None:
        g_norm = sketch_norm(sketch)
    if not math.isfinite(g_norm) or g_norm == 0.0:
        return float("nan"), 0
    sketch = as_float_sketch(sketch)
    row = bank.rows[arm]
    if not (RAW_MIN_NORM < g_norm and g_norm * g_norm < RAW_MAX_PRODUCT * eta):
        sketch = (sketch.astype(np.float64) / g_norm).astype(row.dtype)   # rare: the unit sketch
        g_norm = math.sqrt(float(np.dot(sketch, sketch)))
    gg = g_norm * g_norm
    fresh = not bank.has[arm] or eta == 1.0
    old_sq, old_scale = float(bank.sq[arm]), float(bank.scale[arm])
    # row' = k row + c g.  Python floats: a numpy float64 scalar would upcast float32 rows (NEP 50)
    if fresh:
        row[...] = sketch                                   # m = g / |g|
        k, c, scale = 0.0, 1.0, 1.0 / g_norm
    elif eta >= SCALED_MIN_ETA:
        k, c, scale = (1.0 - eta) * old_scale * g_norm / eta, 1.0, eta / g_norm
        row *= k
        row += sketch
    else:
        k, c, scale = 1.0, eta / ((1.0 - eta) * old_scale * g_norm), (1.0 - eta) * old_scale
        row += c * sketch
    dots = (bank.block @ sketch).tolist()      # rows_j . g for every row, one pass (finite: see RAW_MAX_PRODUCT)
    # H is small: scalar Python over the arms beats a chain of tiny numpy calls here
    total, count = 0.0, 0
    for j, (has, sq, dot) in enumerate(zip(bank.has.tolist(), bank.sq.tolist(), dots)):
        if j != arm and has and sq > 0 and (eligible is None or eligible[j]):
            # cos(g, m_j) = scale_j rows_j.g / (|g| scale_j |rows_j|): the scale cancels
            total += dot / (g_norm * math.sqrt(sq))
            count += 1
    transfer = total / count if count else float("nan")
    if not math.isfinite(transfer):
        transfer = float("nan")                             # never propagate inf
    if fresh:
        new = gg
    else:
        # |k r + c g|^2 = k^2 |r|^2 + 2 k c r.g + c^2 |g|^2, and (k r + c g).g = k r.g + c |g|^2
        predicted = k * k * old_sq + c * c * gg
        new = predicted + 2.0 * c * (dots[arm] - c * gg)
        if not new >= 1e-3 * predicted:                     # cancellation: exact
            new = float(np.dot(row, row))
            if new <= (CANCELLED_EPS * float(np.finfo(row.dtype).eps)) ** 2 * predicted:
                row[...] = 0.0                              # cancelled to rounding noise: a zero memory
                new = 0.0
        if scale < 1e-8:                                    # additive form: fold the scale back in
            row *= scale
            new, scale = float(np.dot(row, row)), 1.0
    bank.sq[arm] = new
    bank.scale[arm] = scale
    bank.has[arm] = True
    bank.last_update[arm] = step
    return transfer, count


# -- Fusions: (l_norm, t_norm, alpha) -> S, NaN meaning "missing" --------------------------
def _one_or_both(both: Callable[[float, float, float], float]) -> Callable[[float, float, float], float]:
    """Lift a two-signal fusion: one present -> that one; none -> NaN."""

    def fuse(l_norm: float, t_norm: float, alpha: float) -> float:
        l_ok, t_ok = not math.isnan(l_norm), not math.isnan(t_norm)
        if l_ok and t_ok:
            return both(l_norm, t_norm, alpha)
        if l_ok:
            return l_norm
        return t_norm if t_ok else float("nan")

    fuse.__doc__ = both.__doc__
    return fuse


@_one_or_both
def fuse_mean(l_norm: float, t_norm: float, alpha: float) -> float:
    """alpha * L~ + (1 - alpha) * T~ (the paper's fusion)."""
    return alpha * l_norm + (1.0 - alpha) * t_norm


@_one_or_both
def fuse_product(l_norm: float, t_norm: float, alpha: float) -> float:
    """L~ * T~: both signals must be high."""
    return l_norm * t_norm


@_one_or_both
def fuse_min(l_norm: float, t_norm: float, alpha: float) -> float:
    """min(L~, T~): the weaker signal decides."""
    return min(l_norm, t_norm)


def fuse_learnability(l_norm: float, t_norm: float, alpha: float) -> float:
    """L~ only (T is never computed)."""
    return l_norm


def fuse_transfer(l_norm: float, t_norm: float, alpha: float) -> float:
    """T~ only (no Q update while T is missing)."""
    return t_norm


FUSIONS: dict[str, Callable[[float, float, float], float]] = {
    "mean": fuse_mean,
    "product": fuse_product,
    "min": fuse_min,
    "learnability": fuse_learnability,
    "transfer": fuse_transfer,
}

#: Which raw signals a fusion needs (the others are not computed at all).
FUSION_USES: dict[str, tuple[bool, bool]] = {
    "mean": (True, True), "product": (True, True), "min": (True, True),
    "learnability": (True, False), "transfer": (False, True),
}


# -- Selection law -------------------------------------------------------------------------
def undefined_q_fill(q: Sequence[float], q_defined: Sequence[bool]) -> float:
    """The Q that arms with an undefined Q take (SPEC §3): the largest defined Q, 0.0 if none."""
    fill = None
    for v, d in zip(q, q_defined):
        if d and (fill is None or v > fill):
            fill = v
    return 0.0 if fill is None else fill


def undefined_prior(n: Sequence[float], q_prior: float, prior_decay: float) -> list[float]:
    """(H,) the Q' an arm with an undefined Q takes under `undefined_q = prior | optimistic`
    (beyond the paper): q_prior * prior_decay ** n_h, n_h its visits (prior: prior_decay = 1,
    a constant prior; optimistic: a high prior that decays with every visit that still left
    Q undefined, i.e. every empty step)."""
    return [q_prior * prior_decay ** k for k in n]


def success_progress(fast: float, slow: float, rate: float, beta_fast: float, beta_slow: float,
                     first: bool, increase: bool = False) -> tuple[float, float, float]:
    """Learning progress of one harness (beyond the paper; Kanitscheider et al. 2021,
    Portelas et al. 2020): a fast and a slow EMA of its training success rate, per visit,
    and progress = |fast - slow|, the recent change in success; with `increase`, only a rise
    counts: max(fast - slow, 0) (a collapse of success, e.g. a departing harness, is not
    learning; `progress_sign = "increase"`).

    fast, slow: the EMAs before this visit; rate: this step's success rate in [0, 1];
    first: no earlier visit measured (both EMAs start at `rate`, progress 0).
    Returns (fast', slow', progress)."""
    if first:
        return rate, rate, 0.0
    fast += beta_fast * (rate - fast)
    slow += beta_slow * (rate - slow)
    return fast, slow, (max(fast - slow, 0.0) if increase else abs(fast - slow))


def noise_weight(progress: float, slow: float, rollouts: float, noise_z: float) -> float:
    """The noise check (beyond the paper): 1 when the harness's success moved by at least
    noise_z binomial standard errors, else progress / (noise_z * se), with
    se = sqrt(slow (1 - slow) / rollouts) the standard error of one step's success rate.
    1 when the check is off (noise_z = 0), when se = 0 (success 0 or 1 does not vary) or
    when the step's rollout count is unknown (NaN)."""
    if noise_z <= 0.0 or not rollouts > 0.0:
        return 1.0
    se = math.sqrt(max(slow * (1.0 - slow), 0.0) / rollouts)
    if se == 0.0:
        return 1.0
    return min(1.0, progress / (noise_z * se))


def selection_probabilities(q: Sequence[float], q_defined: Sequence[bool], n: Sequence[float], bonus_c: float,
                            tau: float, epsilon: float,
                            fill: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The post-warm-up law of SPEC §3. q, q_defined, n: (H,) sequences (lists are
    fastest). Returns (p, U), both (H,) arrays.

    Q'_h = Q_h if defined else max defined Q (0.0 if none); U = Q' + c / sqrt(n + 1);
    p = (1 - eps) softmax(U / tau) + eps / H.
    fill: optional (H,) Q' of each arm whose Q is undefined (`undefined_prior`, beyond the
    paper); None is the paper's max defined Q.

    Plain loops over the H arms: H is a handful, and on small arrays each numpy call
    costs more than the whole loop. (Loops rather than comprehensions: this runs right
    after the memory update has streamed megabytes through the cache, where each extra
    code object costs cache misses; measured ~30% faster there.)
    """
    u = []
    if fill is None:
        top_q = undefined_q_fill(q, q_defined)
        for v, d, k in zip(q, q_defined, n):
            u.append((v if d else top_q) + bonus_c / math.sqrt(k + 1.0))
    else:
        for v, d, k, f in zip(q, q_defined, n, fill):
            u.append((v if d else f) + bonus_c / math.sqrt(k + 1.0))
    top = max(u)
    e, total = [], 0.0
    for x in u:
        y = math.exp((x - top) / tau)
        e.append(y)
        total += y
    scale, floor = (1.0 - epsilon) / total, epsilon / len(u)
    for i, y in enumerate(e):
        e[i] = y * scale + floor
    return np.array(e), np.array(u)


def inverse_cdf_draw(p: np.ndarray, uniform: float) -> int:
    """The arm whose CDF interval holds `uniform` in [0, 1) (scaled by sum(p))."""
    probs = p.tolist()
    target = uniform * sum(probs)
    acc = 0.0
    for arm, x in enumerate(probs):
        acc += x
        if target < acc:
            return arm
    return len(probs) - 1
