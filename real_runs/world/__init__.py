"""The task world of real runs (no torch): seeded tool-use tasks and their checkers
(`tasks`), the canonical tools on an in-memory workspace (`workspace`), agent harnesses
(`harnesses`, call notations in `syntax`), one episode's control loop (`episode`) and the
per-harness task pool (`pool`)."""
