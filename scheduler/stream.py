"""StreamState: one session's progress and playback clock, as every scheduler sees it.

A session's chunks are strictly sequential: chunk k+1 starts only after chunk k's commit.
The playback clock gives each chunk a deadline and a release time:
- the *epoch* chunk (the first after a start or a resume) is due at once (deadline = arrival);
- when it is delivered at t0, chunk k is due at t0 + (k - epoch) * period + playout_delay and is
  released (may start) lookahead seconds (times the degrade factor) before that, which bounds
  how far a session runs ahead;
- `period` is the chunk period times the degrade factor; a degrade change re-anchors the clock
  at the current chunk's deadline (pushed to one period from now if the session is late), so
  later deadlines spread or tighten from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.types import COMMIT, DENOISE, ChunkDone, Kind, PlanItem, SessionSpec

EPS = 1e-9  # float slack for "now has reached that time"


@dataclass(eq=False)
class StreamState:
    """Mutable scheduling state of one admitted session."""

    spec: SessionSpec
    order: int  # admission order: the tie-break among equal deadlines
    added_at: float
    playout_delay: float
    lookahead: float
    target_steps: int = field(init=False)  # steps for chunks not yet started (lowered under overload)
    period_factor: float = 1.0
    chunk_index: int = 0
    steps_done: int = 0  # denoise steps finished in the current chunk
    chunk_steps: int | None = None  # steps in force for the current chunk, once it started
    paused: bool = False
    in_flight: bool = False
    epoch_start: float = field(init=False)  # when the epoch chunk became due
    anchor_time: float | None = None  # when the epoch chunk was delivered (None: not yet)
    anchor_chunk: int = 0
    prev_finish: float | None = None
    started_at: float | None = None  # when the current chunk's first item was planned
    ready_since: float = 0.0
    compute_s: float = 0.0
    chunks_done: int = 0
    misses: int = 0
    first_chunk_at: float | None = None

    def __post_init__(self) -> None:
        self.target_steps = self.spec.steps
        self.epoch_start = self.added_at

    @property
    def session_id(self) -> str:
        return self.spec.session_id

    @property
    def period(self) -> float:
        return self.spec.chunk_period * self.period_factor

    @property
    def starting(self) -> bool:
        """Is the current chunk an epoch chunk (first after a start or resume, due at once)?"""
        return self.anchor_time is None

    @property
    def effective_fps(self) -> float:
        return self.spec.fps / self.period_factor

    @property
    def frames_done(self) -> int:
        return self.chunks_done * self.spec.frames_per_chunk

    # ---- clock ----------------------------------------------------------------------------

    def deadline(self) -> float:
        """When the current chunk must be finished."""
        if self.anchor_time is None:
            return self.epoch_start
        return self.anchor_time + (self.chunk_index - self.anchor_chunk) * self.period + self.playout_delay

    def release(self) -> float:
        """When the current chunk may start (it also waits for the previous commit)."""
        if self.anchor_time is None:
            return self.epoch_start
        # The lookahead stretches with the period: it is counted in chunks, and a chunk's compute
        # time does not shrink when its period is stretched.
        return self.deadline() - self.lookahead * self.period_factor

    def is_ready(self, now: float) -> bool:
        return not self.paused and not self.in_flight and self.release() <= now + EPS

    def rebase(self, factor: float, now: float) -> None:
        """Set the degrade factor and restart the clock at the current chunk (a degrade change).

        The current chunk keeps its deadline, or gets one period from now if that is later: a
        session that fell behind under overload is forgiven its lag once, as a client that is
        told a new frame rate restarts its playback clock; otherwise it would go on missing
        (and look overloaded) long after the new level has made the load fit.
        """
        if self.anchor_time is not None:
            deadline = max(self.deadline(), now + self.spec.chunk_period * factor)
            self.anchor_time = deadline - self.playout_delay
            self.anchor_chunk = self.chunk_index
        self.period_factor = factor

    def pause(self) -> None:
        self.paused = True

    def resume(self, now: float) -> None:
        """Restart the playback clock: the current chunk becomes an epoch chunk due now."""
        if not self.paused:
            return
        self.paused = False
        self.epoch_start = now
        self.anchor_time = None

    # ---- work -----------------------------------------------------------------------------

    def steps_for_chunk(self) -> int:
        return self.target_steps if self.chunk_steps is None else self.chunk_steps

    def next_kind(self) -> Kind:
        return DENOISE if self.steps_done < self.steps_for_chunk() else COMMIT

    def next_item(self) -> PlanItem:
        steps = self.steps_for_chunk()
        kind = self.next_kind()
        return PlanItem(self.session_id, self.chunk_index, kind, self.steps_done, steps)

    def remaining_denoise(self) -> int:
        return self.steps_for_chunk() - self.steps_done

    def mark_planned(self, now: float) -> PlanItem:
        """The session's next item joins a plan; a chunk's step count is fixed when it starts."""
        if self.started_at is None:
            ready = self.release() if self.prev_finish is None else max(self.release(), self.prev_finish)
            self.chunk_steps = self.target_steps
            self.started_at = now
            self.ready_since = min(ready, now)
        self.in_flight = True
        return self.next_item()

    def advance(self, item: PlanItem, elapsed_s: float, now: float) -> ChunkDone | None:
        """Apply a finished item; returns the chunk when the item was its commit."""
        expected = self.next_item()
        if item != expected:
            raise ValueError(f"plan item {item} does not match the session's next item {expected}")
        self.in_flight = False
        self.compute_s += elapsed_s
        if item.kind == DENOISE:
            self.steps_done += 1
            return None
        return self._finish(now)

    def _finish(self, now: float) -> ChunkDone:
        deadline = self.deadline()
        epoch = self.anchor_time is None
        missed = not epoch and now > deadline + EPS
        assert self.started_at is not None, "a chunk finishes only after it was planned"
        started = self.started_at
        done = ChunkDone(
            session_id=self.session_id,
            chunk_index=self.chunk_index,
            finished_at=now,
            deadline=deadline,
            missed=missed,
            queue_delay_s=max(started - self.ready_since, 0.0),
            compute_s=self.compute_s,
            epoch=epoch,
        )
        if epoch:
            self.anchor_time = now
            self.anchor_chunk = self.chunk_index
        if self.first_chunk_at is None:
            self.first_chunk_at = now
        self.chunk_index += 1
        self.steps_done = 0
        self.chunk_steps = None
        self.started_at = None
        self.compute_s = 0.0
        self.prev_finish = now
        self.chunks_done += 1
        self.misses += int(missed)
        return done
