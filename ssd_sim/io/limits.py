"""Bounds on user inputs, from the physics of decoding rather than from what memory happens to hold.

Each limit is stated in the error a value beyond it gets and in the help text of its flag.
"""

from __future__ import annotations

MAX_K = 64  # draft tokens per round: even at acceptance 0.95 the chance to reach position 64 is 4%
MAX_BUDGET = 1024  # cached guesses per sequence and round: each is a branch row the draft decodes K steps
MAX_BATCH = 4096  # sequences decoded together
MAX_DRAFT_DEVICES = 64  # accelerators running the draft
MAX_TOKENS = 2**21  # tokens per sequence (2,097,152): beyond every model's context window
MAX_REQUESTS = 10**6  # requests of one simulated workload
MAX_TEMPERATURE = 10.0  # sampling temperature (above ~2 text is noise)
# Arrival times (ms from the start). The simulated clock is a float64 of ms: below 2**42 ms (~139 years) its spacing
# is at most 2**-10 ms (~1 us), 10x finer than the 0.01 ms the reports print, so every round still moves the clock.
# Far beyond it (1e308) a round's few ms round away and simulated time stops: a silent wrong answer.
MAX_ARRIVAL_MS = float(2**42)
# A temperature below this decodes greedily everywhere, its T -> 0 limit: the planner's Saguaro response resolves T
# to 1e-4 (model.acceptance) and the runtime takes the argmax (ssd_runtime Target / Drafter), so both agree.
GREEDY_BELOW_T = 5e-5


def effective_temperature(temperature: float) -> float:
    """The temperature decoding uses: 0 (greedy) below GREEDY_BELOW_T, else the temperature itself."""
    return 0.0 if temperature < GREEDY_BELOW_T else temperature
