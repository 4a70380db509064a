"""`hb policies`: list every registered policy with a one-line description and its knobs
(`name = default: doc (allowed)`, from the policy's `KNOBS` table); the clairvoyant
references (policies.clairvoyant) carry their mark in brackets, a user's policy (a plugin
or an entry point, policies.registry) the class it comes from."""
from __future__ import annotations

import argparse
import json

from policies.base import LR_SCALE
from policies.knobs import Knobs
from policies.registry import POLICIES, SHIPPED_POLICIES

#: the one knob every policy shares, listed once (policies.base.LR_SCALE)
LR_SCALE_LINE = Knobs({"lr_scale": LR_SCALE}).listing()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print name -> {summary, knobs: defaults} as JSON")


def main(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({name: {"summary": cls.summary, "knobs": cls.knobs(),
                                 **({"reference": cls.reference} if cls.reference else {}),
                                 **({"plugin": _origin(cls)} if name not in SHIPPED_POLICIES else {}),
                                 **({"source": cls.source, "departures": list(cls.departures)} if cls.source else {})}
                          for name, cls in POLICIES.items()}, indent=2))
        return 0
    width = max(map(len, POLICIES))
    for name, cls in POLICIES.items():
        print(f"{name:<{width}}  {cls.summary}")
        if cls.reference:
            print(f"{'':<{width}}  [{cls.reference}]")
        if name not in SHIPPED_POLICIES:
            print(f"{'':<{width}}  [plugin: {_origin(cls)}]")
        if cls.source:
            print(f"{'':<{width}}  source: {cls.source}")
            print("\n".join(f"{'':<{width}}  departure: {d}" for d in cls.departures))
        print("\n".join(cls.KNOBS.without("lr_scale").listing(" " * (width + 4))) or f"{'':<{width}}    (no knobs)")
    print(f"\nevery policy also has {LR_SCALE_LINE}")
    return 0


def _origin(cls) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
