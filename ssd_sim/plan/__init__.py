"""Prediction and planning: the validated Plan (K, fan-out, Saguaro C, backup) and its file, analytic
predictions of AR / SD / SSD tok/s for a Profile and a Plan (predict), the planner's search (planner),
engine flags for a plan (emit), what-if sweeps for the dashboard (whatif) and a measured trace beside its
prediction (compare).

Units: tok/s, ms, tokens. May import `model`, `theory` and `io`; never the simulator (`sim` sits above and
re-ranks the planner's candidates itself).
"""
