"""What a job writes: its trace (header, one record per round, summary) and the summary's request metrics."""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path

from ssd_sim.io.values import utc_now

from .jobs import Job
from .models import ModelSpec


def draft_stub(spec: ModelSpec | None) -> dict:
    """What the trace header says about a draft that never answered this job (it died before)."""
    label = spec.label if spec else "none"
    return {"source": label, "label": label, "dtype": spec.dtype if spec else None,
            "quantize": None if not spec or spec.quantize == "none" else spec.quantize,
            "device": spec.device if spec else None, "kernels": "unknown (the draft was gone)"}


class TraceOut:
    """The job's trace: a TraceWriter flushed after every record, so a killed target leaves whole lines in .partial.
    A write error (a full disk) stops the trace, not the run: the .partial file is cut back to its last whole
    line, `error` says why, and the outputs stay complete."""

    def __init__(self, path: str, header):  # records.Header
        from ssd_sim.io.trace import TraceWriter

        self.writer = TraceWriter(path, header)  # ConfigError here (unwritable) is bad input, before any work
        self.error: str | None = None
        self.whole = 0  # bytes of .partial known to end with a whole line
        self._guard(lambda: None)

    def round(self, rec) -> None:  # records.RoundRecord
        if self.error is None:
            self._guard(lambda: self.writer.round(rec))

    def close(self, summary: dict) -> str | None:
        """The final trace path, or None when writing failed (the .partial file then holds whole lines)."""
        if self.error is None:
            self._guard(lambda: self.writer.close(summary))
        return None if self.error else str(self.writer.path)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.writer.abort()

    def _guard(self, write: Callable[[], object]) -> None:
        try:
            write()
            if self.writer.partial.exists():  # still open (close() renames it)
                self.writer.flush()
                self.whole = self.writer.partial.stat().st_size
        except OSError as e:
            self.error = f"cannot write the trace {self.writer.partial} ({e.strerror or e}); it stops there"
            self.abort()
            with contextlib.suppress(OSError):
                os.truncate(self.writer.partial, self.whole)


def job_header(job: Job, target: dict, draft: dict | None, cores: int):
    """The trace's header (records.Header) for a job on these models (models.describe)."""
    import torch
    import transformers

    from ssd_sim.io.records import Header

    from . import __version__
    from .device import host_record
    from .modes import decoding

    speculative = decoding(job.mode).uses_draft

    def both(key: str) -> dict:  # a model property of the target and (when it runs) the draft
        return {"target": target[key], "draft": draft[key] if speculative else None}

    def name(info: dict) -> str:  # a Hugging Face id where the model came from the hub cache, not its cache path
        return info.get("hf_id") or (info["source"] if info["source"] != "tiny" else info["label"])

    kernels = {"target": target["kernels"], **({"draft": draft["kernels"]} if speculative else {})}
    return Header.build(
        mode=job.mode, plan=job.plan.to_dict(), batch_size=job.plan.batch_size,
        models={"target": name(target), "draft": name(draft) if speculative else None},
        dtype=both("dtype"), quantize=both("quantize"), devices=both("device"),
        versions={"python": platform.python_version(), "torch": torch.__version__,
                  "transformers": transformers.__version__, "ssd": __version__},
        prompt_source=job.header.get("prompt_source", "api"), num_prompts=len(job.prompts),
        max_new_tokens=job.max_new_tokens,
        machine=f"{platform.machine()} {platform.system()}, {os.cpu_count()} cpus, torch threads 1 per process",
        host=host_record(kernels, cores).to_dict(), started_at=utc_now(),
        seed=job.seed, forced_acceptance=job.forced_acceptance, ignore_eos=job.ignore_eos,
        log_topn=job.log_topn if speculative else 0,
        top_k=job.truncation.top_k, top_p=job.truncation.top_p,
        **{k: v for k, v in job.header.items() if k != "prompt_source"},
    )


def job_summary(header, rounds: list, target, outputs: list[list[int]]):
    """The summary line: decode tokens / decode wall time (prefill reported apart), end-to-end tok/s (every
    generated token / the job's wall time, prefill and arrival waits included), per-request times and their
    TTFT / TPOT percentiles (ms, defined as in ssd_sim.sim.metrics), plus summarize()."""
    from ssd_sim.io.records import Summary
    from ssd_sim.io.trace import Trace, summarize

    generated = sum(len(o) for o in outputs)
    job_s = max((r.finish_ms for r in target.requests), default=0.0) / 1e3
    return Summary.of(summarize(Trace(header, rounds)), faults=tuple(target.faults), prefill_ms=target.prefill_ms,
                      generated_tokens=generated, job_s=job_s, e2e_tok_s=generated / job_s if job_s else 0.0,
                      **request_percentiles(target.requests), **host_syncs(target), **graph_counts(target),
                      requests=tuple(sorted(target.requests, key=lambda r: r.seq)))


def host_syncs(target) -> dict:
    """Median host reads of device tensors per round of each side (Summary fields; None without rounds)."""
    import statistics

    return {f"host_syncs_{side}": statistics.median(xs) if xs else None
            for side, xs in (("target", target.syncs), ("draft", target.draft_syncs))}


def graph_counts(target) -> dict:
    """Each side's CUDA graphs at the job's end (GraphCache.counts; Summary fields, None where a side ran without
    graphs): a side whose captures all failed ran eager, and the summary says so."""
    own = target.kv.graph_counts() if target.kv is not None else None
    return {"graphs_target": own, "graphs_draft": target.draft_graphs}


def graph_sides(s) -> list[tuple[str, dict]]:
    """(side, GraphCache.counts) of each side of a records.Summary that ran CUDA graphs."""
    return [(side, g) for side, g in (("target", s.graphs_target), ("draft", s.graphs_draft)) if g]


ALL_FAILED = "every CUDA graph capture"  # how graph_warnings' line for a side that ran all eager begins


def graph_warnings(s) -> list[str]:
    """One line per side whose CUDA graph captures failed: all of them (it ran eager; the line begins with
    ALL_FAILED) or some shapes."""
    out = []
    for side, g in graph_sides(s):
        if g["eager_shapes"] and not g["graphs"]:
            out.append(f"{ALL_FAILED} of the {side} failed ({g['eager_shapes']} shapes): it ran eager, "
                       f"at eager speed; bench/gpu_check.py prints why, and --{side}-compile off runs eager without "
                       f"trying")
        elif g["eager_shapes"]:
            out.append(f"{g['eager_shapes']} forward shapes of the {side} could not be captured in CUDA graphs and "
                       f"ran eager ({g['graphs']} shapes replayed)")
    return out


def request_percentiles(requests: list) -> dict:
    """TTFT and TPOT (records.RequestRecord) p50 / p90 / p99 (ms), as Summary fields; None where no request has one."""
    import numpy as np

    ttft = [r.ttft_ms for r in requests]
    tpot = [r.tpot_ms for r in requests if r.tpot_ms is not None]
    out = {}
    for name, xs in (("ttft_ms", ttft), ("tpot_ms", tpot)):
        qs = np.percentile(xs, [50, 90, 99]).tolist() if xs else [None] * 3
        out.update({f"{name}_p{p}": q for p, q in zip((50, 90, 99), qs, strict=True)})
    return out


def default_trace_path(mode: str) -> Path:
    """runs/<mode>-<UTC timestamp>.jsonl under the current directory."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return Path("runs") / f"{mode}-{stamp}.jsonl"
