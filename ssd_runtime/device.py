"""Where a model lives, and the wall clock the phase timings of a round are read from."""

from __future__ import annotations

import time

import torch


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def now_ms(device: torch.device | None = None) -> float:
    """Wall clock in milliseconds. Given a CUDA device, first wait for the work queued on it, so the time
    between two calls is the time the GPU spent, not the time it took to queue the kernels."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() * 1e3
