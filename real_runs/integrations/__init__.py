"""Real runs inside other trainers: TRL's GRPOTrainer (`trl_grpo`: scheduler callback and
trainer; `trl_run`: its knob table and `hb real --backend trl`) and verl's curriculum
sampler (`verl_sampler`); their shared step signals (`signals`). Module names never
shadow the installed `trl` / `verl` packages."""
