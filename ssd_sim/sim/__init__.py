"""The discrete-event simulator: the SimPy model of target and draft devices (des), verification outcomes
drawn from the acceptance model or replayed from a trace (outcomes), continuous batching (batching),
request arrivals and prefill (workload), the run's metrics (metrics), the simulated timeline and its
Chrome-trace export (timeline), re-ranking of the planner's candidates by simulation (rerank), and predictions
scored on requests the calibration never saw (holdout: `ssd-plan holdout`, bench/fidelity.py).

Drops the closed forms' assumptions (i.i.d. acceptance, fixed latencies, independent hits). Units: ms,
tokens, tok/s. May import `plan`, `model`, `theory` and `io`.
"""
