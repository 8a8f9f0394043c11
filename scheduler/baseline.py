"""SerialScheduler: the baseline the benchmarks compare StepScheduler with.

It is the pattern of single-stream servers: one stream at a time, batch size 1, round robin.
The session at the head of a FIFO runs its whole chunk (all its steps, then its commit) and
then goes to the back. It admits everyone up to `max_sessions`, never degrades, and shares the
deadline bookkeeping of `SchedulerBase`, so its misses are counted exactly like the
StepScheduler's. A session that is not yet released (too far ahead) is skipped for the next one.
"""

from __future__ import annotations

from collections import deque

from scheduler.base import SchedulerBase
from scheduler.config import SchedulerConfig
from scheduler.cost_model import CostModel
from scheduler.stream import StreamState
from scheduler.types import ChunkDone, StepPlan


class SerialScheduler(SchedulerBase):
    """One chunk of one session at a time, FIFO over sessions, batch size 1."""

    def __init__(self, config: SchedulerConfig | None = None, cost: CostModel | None = None) -> None:
        super().__init__(config, cost)
        self._fifo: deque[str] = deque()

    def schedule(self, now: float) -> StepPlan | None:
        self._tick(now)
        ready = [st for sid in self._fifo if (st := self._streams[sid]).is_ready(now)]
        if not ready:
            return None
        # A chunk that has started is finished before another session's chunk begins.
        st = next((s for s in ready if s.started_at is not None), ready[0])
        return self._plan([st], st.next_kind(), now)

    def _batch_limit(self) -> int:
        return 1

    def _on_admit(self, stream: StreamState) -> None:
        self._fifo.append(stream.session_id)

    def _on_update(self, done: list[ChunkDone], now: float) -> None:
        for chunk in done:  # a session with a finished chunk is never one that just failed
            self._fifo.remove(chunk.session_id)
            self._fifo.append(chunk.session_id)

    def _on_removed(self) -> None:
        self._fifo = deque(sid for sid in self._fifo if sid in self._streams)
