"""What each decoding mode does differently, in one object per mode (the target and the draft ask it).

    AR   the target decodes alone: no draft, no proposal (K = 0 every round).
    SD   the draft drafts K tokens on request, sequentially, without down-weighting (no cache to aim at).
    SSD  the draft answers from its speculation cache (backup on a miss), then speculates the next round
         while the target verifies; Saguaro's C down-weights the cached tokens; the trace records hits.
"""

from __future__ import annotations

from dataclasses import dataclass

from ssd_sim.io.records import Phase
from ssd_sim.plan.plan import Mode, Plan


@dataclass(frozen=True)
class Decoding:
    """Autoregressive decoding; the base of the speculative modes."""

    mode: Mode = Mode.AR
    uses_draft: bool = False  # the target asks the draft for a proposal every round
    caches: bool = False  # the draft looks proposals up in its cache and speculates after replying
    draft_phase: Phase | None = None  # the trace phase the draft's proposal work is timed as

    def backup(self, plan: Plan, rows: int) -> str:
        """How the draft fills proposals it has not cached, for `rows` sequences in flight."""
        raise ValueError(f"{self.mode} decoding has no draft")

    def saguaro_c(self, plan: Plan, position: int) -> float:
        """The down-weighting C of the cached tokens when sampling the draft token at stopping position i."""
        return 1.0

    def reach(self, K: int) -> dict[str, int | None]:
        """Positions beyond the last committed token each model reads (tokens; None: the role does not run)."""
        return {"target": 0, "draft": None}


@dataclass(frozen=True)
class SpeculativeDecoding(Decoding):
    """Synchronous SD: every proposal is drafted when asked for."""

    mode: Mode = Mode.SD
    uses_draft: bool = True
    draft_phase: Phase | None = Phase.DRAFT_SD

    def backup(self, plan: Plan, rows: int) -> str:
        return "sd"

    def reach(self, K: int) -> dict[str, int | None]:
        return {"target": K, "draft": K}  # the verify of K tokens; K draft steps


@dataclass(frozen=True)
class SpeculativeSpeculativeDecoding(SpeculativeDecoding):
    """SSD (Saguaro): cache hits, backups on a miss, speculation overlapped with the verify."""

    mode: Mode = Mode.SSD
    caches: bool = True
    draft_phase: Phase | None = Phase.DRAFT_BACKUP

    def backup(self, plan: Plan, rows: int) -> str:
        return plan.backup_for(rows)

    def saguaro_c(self, plan: Plan, position: int) -> float:
        return plan.c_at(position)

    def reach(self, K: int) -> dict[str, int | None]:
        return {"target": K, "draft": 2 * K + 1}  # branches: K + 1 glue positions, then K tree steps


_BY_MODE = {d.mode: d for d in (Decoding(), SpeculativeDecoding(), SpeculativeSpeculativeDecoding())}


def decoding(mode: str | Mode) -> Decoding:
    """The strategy object of a mode ('ar', 'sd', 'ssd')."""
    return _BY_MODE[Mode(mode)]
