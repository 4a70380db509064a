"""Synthetic environments (SPEC §6): a registry of kinds and `make_env`.

Each kind lives in its own module (hbsim/envs/<kind>.py) that defines a subclass of
`hbsim.envs.base.SyntheticEnv`; modules are imported on first use, so a kind's import cost
is only paid when it is used.

    from hbsim.envs import ENVS, make_env
    ENVS["bernoulli"].knobs()              # default knobs
    env = make_env("bernoulli", seed=0, lr=0.5)
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Iterator

from hbsim.envs.base import CATEGORIES, COMMON_KNOBS, SUITES, Batch, SyntheticEnv
from policies.errors import UserError

#: kind -> (module, class) that defines it
ENV_CLASSES: dict[str, tuple[str, str]] = {
    "bernoulli": ("hbsim.envs.bernoulli", "BernoulliEnv"),
    "drifting": ("hbsim.envs.drifting", "DriftingEnv"),
    "student": ("hbsim.envs.student", "StudentEnv"),
    "scenario": ("hbsim.envs.scenario", "ScenarioEnv"),
    "twin": ("hbsim.envs.twin", "TwinEnv"),
}


class _Registry(Mapping):
    """kind -> SyntheticEnv subclass, importing each module on first use."""

    def __getitem__(self, kind: str) -> type[SyntheticEnv]:
        if kind not in ENV_CLASSES:
            raise UserError(f"env kind={kind!r} is unknown; valid kinds: {', '.join(ENV_CLASSES)} "
                            f"(presets: {', '.join(ENV_PRESETS)})")
        module, name = ENV_CLASSES[kind]
        return getattr(importlib.import_module(module), name)

    def __iter__(self) -> Iterator[str]:
        return iter(ENV_CLASSES)

    def __len__(self) -> int:
        return len(ENV_CLASSES)

    def __contains__(self, kind: object) -> bool:       # Mapping's would raise the UserError above
        return kind in ENV_CLASSES


ENVS = _Registry()


_COUNTEREXAMPLE = {"dim": 13, "sketch_dim": 13, "axis_aligned": True, "rotation": 0.0, "walk": 0.0, "noise": 0.01,
                   "noise_spread": 0.0, "shared": 0.6, "shared_spread": 0.0, "category_share": 0.0,
                   "conflict_pairs": "0-1,2-3,4-5", "conflict_cos": 0.2, "beta1": 0.0}

#: named presets: name -> (kind, knobs). A config's env section may say kind = "<preset>";
#: the preset's knobs are then defaults that the section's own knobs override, and the
#: resolved config records the underlying kind and every knob (`expand_preset`).
ENV_PRESETS: dict[str, tuple[str, dict]] = {
    # the reading note's Adam counterexample (§4.2, eq. 11): every direction on a coordinate
    # axis, harness pairs whose raw targets still agree (cos +0.2: a large shared part) but
    # whose own parts are opposite, and an Adam state that has already seen large gradients
    # on the shared axis, so it damps the shared part of every update. Gradient cosines (T on
    # the gradient sketch, ~ +0.5) say "transfers"; the actual updates of a pair point
    # against each other (T on the update sketch ~ -0.1) and a step helps nobody but its own
    # harness. `sgd-control` is the same model with SGD, where both T agree.
    "adam-counterexample": ("drifting", dict(_COUNTEREXAMPLE, optimizer="adam", shared_v0=100.0)),
    "sgd-control": ("drifting", dict(_COUNTEREXAMPLE, optimizer="sgd", lr=0.15)),
    # a held-out harness that really is like training harnesses 0 and 1 (transfer to it is known)
    "aligned-heldout": ("student", {"heldout_align": "0,1", "heldout_align_strength": 0.9}),
}


def expand_preset(env: dict) -> dict:
    """{"kind": preset, **knobs} -> {"kind": its kind, **preset knobs, **knobs}; other env
    sections are returned unchanged."""
    kind = env.get("kind")
    if kind not in ENV_PRESETS:
        return dict(env)
    base, knobs = ENV_PRESETS[kind]
    return {**knobs, **{k: v for k, v in env.items() if k != "kind"}, "kind": base}


def make_env(kind: str, seed: int = 0, **knobs) -> SyntheticEnv:
    """Build a registered environment (or a preset of ENV_PRESETS); unknown kinds or knobs
    raise UserError listing valid ones."""
    if kind in ENV_PRESETS:
        env = expand_preset({"kind": kind, **knobs})
        kind, knobs = env.pop("kind"), env
    return ENVS[kind](seed=seed, **knobs)


__all__ = ["CATEGORIES", "COMMON_KNOBS", "ENVS", "ENV_CLASSES", "ENV_PRESETS", "expand_preset", "SUITES", "Batch",
           "SyntheticEnv", "make_env"]
