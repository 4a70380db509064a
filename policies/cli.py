"""`hb policies`: list every registered policy with a one-line description and its knobs
(`name = default: doc (allowed)`, from the policy's `KNOBS` table)."""
from __future__ import annotations

import argparse
import json

from policies.registry import POLICIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print name -> {summary, knobs: defaults} as JSON")


def main(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({name: {"summary": cls.summary, "knobs": cls.knobs(),
                                 **({"source": cls.source, "departures": list(cls.departures)} if cls.source else {})}
                          for name, cls in POLICIES.items()}, indent=2))
        return 0
    width = max(map(len, POLICIES))
    for name, cls in POLICIES.items():
        print(f"{name:<{width}}  {cls.summary}")
        if cls.source:
            print(f"{'':<{width}}  source: {cls.source}")
            print("\n".join(f"{'':<{width}}  departure: {d}" for d in cls.departures))
        print("\n".join(cls.KNOBS.listing(" " * (width + 4))) or f"{'':<{width}}    (no knobs)")
    return 0
