"""The native trainer of real runs (torch, imported by its modules only): the presets'
knob table (`presets`, torch-free), the byte transformer (`model`, or a local Hugging Face
model via `hf`), batched multi-turn rollouts (`rollout`), the held-out evaluator
(`evaluation`), GRPO maths and the optimizer step (`trainer`), the torch gradient sketch
(`sketch`), the supervised warm start (`warmstart`), `GRPOAdapter` (`adapter`),
checkpoints (`checkpoint`) and speed figures (`bench`)."""
