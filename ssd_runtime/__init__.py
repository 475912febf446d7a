"""ssd_runtime: run AR, SD and SSD on real models with two processes (target and draft), write traces.

Modules: models (loading), kv (batched KV cache with per-row rollback), sampling (verification math),
draft / target (the two sides of a round), transport (torch.distributed messages), run (processes,
jobs), prompts, fetch (the real model pair), cli (`ssd-run`).
"""

__version__ = "0.1.0"
