"""What one setup is: target / draft latency models (ms as a function of rows x tokens), the acceptance
model (per-position acceptance and bonus-token hit curves or per-position hit tables by temperature and
Saguaro C; `logged` derives them at any T, C and fan-out from the top-N distributions traces log), the Profile
that bundles them with their provenance, the built-in presets (presets/*.toml -> Profile), calibration
(runtime traces -> Profile) and which profile describes a trace's setup (tracematch).

A Profile is the only input the layers above need about hardware and models. May import `theory` and
`io` only; knows nothing about plans, prediction or simulation.
"""
