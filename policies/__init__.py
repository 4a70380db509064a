"""Scheduling policies for multi-harness GRPO (SPEC §3-5), numpy only."""
from policies.base import Allocation, Feedback, Policy
from policies.registry import POLICIES, make, register

__all__ = ["Allocation", "Feedback", "Policy", "POLICIES", "make", "register"]
