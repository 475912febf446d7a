"""ssd_runtime: run AR, SD and SSD on real models with two processes (target and draft), write traces.

Modules: models (loading), kv (batched KV cache with per-row rollback), sampling (verification math),
draft / target (the two sides of a round, the algorithm only), draft_trace (the draft's bonus ranks and
phase timings for the trace), device (model device, phase clock), transport (torch.distributed messages),
run (processes, jobs), prompts, fetch (the real model pair), cli (`ssd-run`), hooks (test-only
misbehaviour, attached to a job's target and draft when a test asks for it).
"""

__version__ = "0.1.0"
