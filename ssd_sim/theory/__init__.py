"""The paper's math: closed forms (analytic), the fan-out allocation (fanout) and Saguaro sampling (saguaro).

Owns every formula that holds for any setup: expected tokens per round, SD / SSD speedups (Theorem 7,
Corollary 16), the critical batch size b*, the hit model miss(F) = min(1, c F^-r) and its exactly optimal
integer fan-out, sigma_{F,C}(q) and the hit / acceptance it yields on explicit distributions. Inputs are
plain numbers and numpy arrays; latencies are in units of one target verification unless a name ends in
`_ms`. Pure numpy: imports nothing of ours (it is the bottom layer, beside `io`).
"""
