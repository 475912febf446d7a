"""File formats and errors: the trace schema (reader, writer, summary), the host record (which machine a trace or
profile was measured on, this machine, and how two differ), JSON files read with one-line errors and written
atomically, the bounds and parsers of user input and the warnings for valid input almost certainly not meant
(limits, values, sanity), and ConfigError, the one error type for bad user input.

This is what ssd_runtime shares with the planner besides Plan: the runtime writes traces with
`trace.TraceWriter` and records `host.Host` in their headers; calibration and the dashboard read them with
`trace.read_trace`. Imports nothing of ours (bottom layer, beside `theory`).
"""
