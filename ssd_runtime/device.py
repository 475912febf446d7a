"""Where a model lives, the wall clock the phase timings of a round are read from, and the host record."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import torch

from ssd_sim.io.host import Host, current_host


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


class PhaseClock:
    """Phase boundaries of a round without a sync per phase: the host clock on a CPU; on a GPU CUDA events on the
    current stream, read when the round's record is written (after the round's own host read of its results, so
    the events are complete and reading them does not wait). Units: ms."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def mark(self):
        """A phase boundary: ms on the host clock (CPU), or a recorded CUDA event."""
        if not self.cuda:
            return time.perf_counter() * 1e3
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def between(self, start, end) -> float:
        """ms from mark `start` to mark `end`."""
        if not self.cuda:
            return end - start
        end.synchronize()
        return float(start.elapsed_time(end))


def host_record(kernels: dict[str, str], cores: int) -> Host:
    """This host for a trace header: what ssd_sim sees without torch, plus torch's oneDNN version, the ISA
    its CPU kernels dispatch to, CUDA devices (when nvidia-smi is missing), each model's kernel path and the
    cores the run had (counted before the processes were pinned to one core each)."""
    host = replace(current_host(), cores=cores)
    gpus = host.gpus or tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    onednn = re.search(r"(?:oneDNN|MKL-DNN) v([\d.]+)", torch.__config__.show())
    return replace(host, gpus=gpus, torch=torch.__version__, onednn=onednn.group(1) if onednn else "",
                   cpu_capability=torch.backends.cpu.get_cpu_capability(), kernels=dict(kernels))
