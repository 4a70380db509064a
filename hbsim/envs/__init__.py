"""Synthetic environments (SPEC §6): a registry of kinds and `make_env`.

Each kind lives in its own module (hbsim/envs/<kind>.py) that defines a subclass of
`hbsim.envs.base.SyntheticEnv` whose class attribute `kind` equals the registry name. Modules
are imported on first use, so a kind's import cost is only paid when it is used.

    from hbsim.envs import ENVS, make_env
    ENVS["bernoulli"].knobs()              # default knobs
    env = make_env("bernoulli", seed=0, lr=0.5)
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Iterator

from hbsim.envs.base import CATEGORIES, COMMON_KNOBS, SUITES, Batch, Knob, SyntheticEnv
from policies.errors import UserError

#: kind -> module that defines it
ENV_MODULES: dict[str, str] = {
    "bernoulli": "hbsim.envs.bernoulli",
    "drifting": "hbsim.envs.drifting",
    "student": "hbsim.envs.student",
}


class _Registry(Mapping):
    """kind -> SyntheticEnv subclass, importing each module lazily."""

    def __init__(self, modules: dict[str, str]):
        self._modules = modules
        self._classes: dict[str, type[SyntheticEnv]] = {}

    def __getitem__(self, kind: str) -> type[SyntheticEnv]:
        if kind not in self._modules:
            raise UserError(f"env kind={kind!r} is unknown; valid kinds: {', '.join(self._modules)}")
        if kind not in self._classes:
            module = importlib.import_module(self._modules[kind])
            found = [obj for obj in vars(module).values()
                     if isinstance(obj, type) and issubclass(obj, SyntheticEnv) and obj.kind == kind]
            if not found:
                raise ValueError(f"env kind={kind!r}: module {self._modules[kind]} defines no "
                                 f"SyntheticEnv subclass with kind={kind!r}")
            self._classes[kind] = found[0]
        return self._classes[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)

    def __contains__(self, kind: object) -> bool:
        return kind in self._modules


ENVS = _Registry(ENV_MODULES)


def make_env(kind: str, seed: int = 0, **knobs) -> SyntheticEnv:
    """Build a registered environment; unknown kinds or knobs raise ValueError listing valid ones."""
    return ENVS[kind](seed=seed, **knobs)


__all__ = ["CATEGORIES", "COMMON_KNOBS", "ENVS", "ENV_MODULES", "SUITES", "Batch", "Knob",
           "SyntheticEnv", "make_env"]
