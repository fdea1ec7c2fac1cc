"""How big the next claim may be.

A claim returns every payload it takes whole. When one times out (our `statement_timeout`,
or no answer in time), retrying it as it was would time out again for ever: rows of 150 MB
made every claim of their queue time out, and the job behind them never ran. So the next
claim asks for an eighth of the rows and of the bytes, and so on down to one row; a claim of
one row that still times out names its row, which the producer then probes alone
(`quarantine.probe_size`). Each claim answered in time lets the size grow back eightfold.
"""

from __future__ import annotations

import dataclasses

import psycopg
from taskboard.core.engine.db_errors import AnswerTimeout
from taskboard.core.engine.flights import ClaimPlan

SHRINK = 8


def is_timeout(exc: BaseException) -> bool:
    """A statement that ran out of time: the server's `statement_timeout` (57014) or our own
    answer limit."""
    if isinstance(exc, AnswerTimeout):
        return True
    return isinstance(exc, psycopg.Error) and exc.sqlstate == "57014"


class ClaimSizer:
    """The producer's claim size after timeouts (full size until one happens)."""

    def __init__(self, claim_bytes: int) -> None:
        self._claim_bytes = claim_bytes
        self.divisor = 1

    @property
    def shrunk(self) -> bool:
        """Claims are smaller than usual: grouped completions then claim nothing, so a
        claim that times out never holds finished jobs' completions back with it."""
        return self.divisor > 1

    def fit(self, plan: ClaimPlan) -> ClaimPlan:
        """`plan` cut to the current size."""
        limit = max(1, plan.limit // self.divisor)
        return dataclasses.replace(
            plan,
            limit=limit,
            db_limit=min(plan.db_limit, limit),
            max_bytes=max(1, self._claim_bytes // self.divisor),
        )

    def timed_out(self, plan: ClaimPlan) -> bool:
        """A claim of `plan` timed out: claim less next time. True when it asked for one row
        already (the row it met is to be probed alone)."""
        if plan.limit <= 1:
            return True
        self.shrink()
        return False

    def shrink(self) -> None:
        """Claim an eighth as much from now on (one row at least)."""
        self.divisor = min(self.divisor * SHRINK, 1 << 30)

    def answered(self) -> None:
        """A claim came back in time."""
        self.divisor = max(1, self.divisor // SHRINK)
