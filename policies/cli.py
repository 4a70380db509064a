"""`hb policies`: list every registered policy with a one-line description and its knobs
(`name = default: doc (allowed)`, from the policy's `KNOBS` table); the clairvoyant
references (policies.clairvoyant) carry their mark in brackets."""
from __future__ import annotations

import argparse
import json

from policies.registry import POLICIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print name -> {summary, knobs: defaults} as JSON")


def main(args: argparse.Namespace) -> int:
    if args.json:
        print(json.dumps({name: {"summary": cls.summary, "knobs": cls.knobs(),
                                 **({"reference": cls.reference} if cls.reference else {})}
                          for name, cls in POLICIES.items()}, indent=2))
        return 0
    width = max(map(len, POLICIES))
    for name, cls in POLICIES.items():
        print(f"{name:<{width}}  {cls.summary}")
        if cls.reference:
            print(f"{'':<{width}}  [{cls.reference}]")
        print("\n".join(cls.KNOBS.listing(" " * (width + 4))) or f"{'':<{width}}    (no knobs)")
    return 0
