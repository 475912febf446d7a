"""Command lines: `ssd-plan` (plan), `ssd-plan calibrate` (calibrate), `ssd-plan holdout`
(holdout), `ssd-plan workload` (workload), `ssd-plan capacity` (capacity), `ssd-sim` (sim) and the argument
parsing they share with `ssd-run` (args: knob flags, number parsers, one-line errors with exit code 2).

Thin: parse, call the layers below, print tables or JSON, write files atomically. The top layer: may
import every other part of ssd_sim; nothing in ssd_sim imports it.
"""
