"""Scheduling policies for multi-harness GRPO (SPEC §3-5), numpy only: the interface
(`Policy`, `Feedback`, `Allocation`), the registry (`POLICIES`, `make`) and `register`, the
door for a user's own policy (`policies.registry`: plugin modules, the
`harnessbandit.policies` entry points; docs/EXTENDING.md)."""
from harnessbandit.origin import pin as _pin

_pin()   # the distribution's package names resolve to the installed packages (harnessbandit/origin.py)

from policies.base import Allocation, Feedback, Policy
from policies.registry import POLICIES, make, register

__all__ = ["Allocation", "Feedback", "Policy", "POLICIES", "make", "register"]
