"""SchedulerBase: the interface every scheduler offers, and the bookkeeping they share.

Sessions, admission and its queue, pause/resume, applying a finished plan (`update`), failures,
utilisation and stats live here; a subclass decides only what to run next (`schedule`), what
batch size it expects (for utilisation), what else refuses a session, and what to do after each
plan. `StepScheduler` and the `SerialScheduler` baseline are the two subclasses, so benchmarks
compare policies, not bookkeeping.

The caller's contract: `schedule(now)` returns a plan (or None when nothing is ready; then
`next_release(now)` says when to ask again); run it; `update(plan, result, now)` applies it and
returns the finished chunks. Times are whatever clock the caller uses (wall or virtual), but they
must not run backwards.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from scheduler.config import SchedulerConfig
from scheduler.cost_model import CostModel
from scheduler.stream import StreamState
from scheduler.types import COMMIT, DENOISE, Admission, ChunkDone, Kind, SessionSpec, StepPlan, StepResult


class SchedulerBase(ABC):
    """Session bookkeeping shared by the schedulers; subclasses implement `schedule`."""

    def __init__(self, config: SchedulerConfig | None = None, cost: CostModel | None = None) -> None:
        self.config = config if config is not None else SchedulerConfig()
        self.cost = cost if cost is not None else CostModel()
        self._streams: dict[str, StreamState] = {}
        self._queue: deque[SessionSpec] = deque()
        self._from_queue: list[str] = []
        self._failed: list[str] = []
        self._order = itertools.count()
        self._clock = 0.0
        self._chunks = 0
        self._misses = 0
        self._frames = 0
        self._batches = 0
        self._batched_items = 0

    # ---- what subclasses decide -----------------------------------------------------------

    @abstractmethod
    def schedule(self, now: float) -> StepPlan | None:
        """The next batch to run, or None when no session has a ready item."""

    @abstractmethod
    def _batch_limit(self) -> int:
        """The largest batch the policy forms (utilisation assumes it batches up to that)."""

    def _refusal(self, sessions: int, utilisation: float) -> str | None:
        """Why a session that would make `sessions` sessions is refused (None: admit it)."""
        if sessions > self.config.max_sessions:
            return f"session limit: {sessions} sessions > max_sessions {self.config.max_sessions}"
        return None

    def _on_admit(self, stream: StreamState) -> None:  # noqa: B027 - optional hook
        """Called when a session is admitted (from the door or the queue)."""

    def _on_update(self, done: list[ChunkDone], now: float) -> None:  # noqa: B027 - optional hook
        """Called after each plan has been applied."""

    def _on_removed(self) -> None:  # noqa: B027 - optional hook
        """Called after sessions were removed or failed."""

    def degrade_state(self) -> tuple[int, int, float]:
        """(degrade level, steps removed, chunk-period factor); the baseline never degrades."""
        return 0, 0, 1.0

    @property
    def degrade_level(self) -> int:
        return self.degrade_state()[0]

    # ---- sessions -------------------------------------------------------------------------

    @property
    def session_ids(self) -> tuple[str, ...]:
        """Admitted sessions (queued ones are not admitted), in admission order."""
        return tuple(self._streams)

    def add_session(self, spec: SessionSpec, now: float) -> Admission:
        """Admit, refuse or (with `queue_when_full`) queue a new session."""
        self._tick(now)
        sid = spec.session_id
        if sid in self._streams or any(q.session_id == sid for q in self._queue):
            raise ValueError(f"session {sid!r} already exists")
        load = self._admission_load(spec)
        if self.config.queue_when_full and self._queue:
            reason: str | None = f"{len(self._queue)} session(s) queued before it"
        else:
            reason = self._refusal(len(self._streams) + 1, load)
            if reason is None:
                self._admit(spec, now)
                return Admission(True, f"admitted: predicted utilisation {load:.2f}", load)
        assert reason is not None
        if self.config.queue_when_full:
            self._queue.append(spec)
            return Admission(False, reason, load, len(self._queue))
        return Admission(False, reason, load)

    def remove_session(self, session_id: str, now: float | None = None) -> None:
        """Drop a session (admitted or queued); unknown ids are ignored. Admits from the queue."""
        if now is not None:
            self._tick(now)
        if session_id in self._streams:
            del self._streams[session_id]
            self._on_removed()
            self._admit_queued(self._clock)
        else:
            self._queue = deque(q for q in self._queue if q.session_id != session_id)

    def admitted_from_queue(self) -> list[str]:
        """Ids admitted from the queue since the last call, in admission order."""
        ids, self._from_queue = self._from_queue, []
        return ids

    def pause(self, session_id: str, now: float) -> None:
        """Stop scheduling the session at the next step boundary; it has no deadlines."""
        self._tick(now)
        self._stream(session_id).pause()

    def resume(self, session_id: str, now: float) -> None:
        """Schedule the session again; its playback clock restarts (next chunk due now)."""
        self._tick(now)
        self._stream(session_id).resume(now)

    def session_spec(self, session_id: str) -> SessionSpec:
        return self._stream(session_id).spec

    def effective_fps(self, session_id: str) -> float:
        """The frame rate the session is delivered at now (its fps over the degrade factor)."""
        return self._stream(session_id).effective_fps

    # ---- the loop -------------------------------------------------------------------------

    def next_release(self, now: float) -> float | None:
        """When the next item becomes ready (`now` if one is ready); None if nothing will."""
        times = [st.release() for st in self._streams.values() if not (st.paused or st.in_flight)]
        return max(min(times), now) if times else None

    def update(self, plan: StepPlan, result: StepResult, now: float) -> list[ChunkDone]:
        """Apply a finished plan: advance each item's session; return the finished chunks."""
        self._tick(now)
        failed = set(result.failed_sessions)
        done: list[ChunkDone] = []
        for item in plan.items:
            st = self._streams.get(item.session_id)
            if st is None or not st.in_flight:  # removed (or removed and re-added) meanwhile
                continue
            if item.session_id in failed:
                st.in_flight = False
                continue
            chunk = st.advance(item, result.elapsed_s, now)
            if chunk is not None:
                done.append(chunk)
                self._chunks += 1
                self._misses += int(chunk.missed)
                self._frames += st.spec.frames_per_chunk
        for sid in result.failed_sessions:
            if self._streams.pop(sid, None) is not None:
                self._failed.append(sid)
        if failed:
            self._on_removed()
        # A batch with a failure may have stopped early: its time says nothing about the cost.
        if plan.items and not failed and result.elapsed_s > 0:
            self.cost.observe(plan.kind, len(plan.items), result.elapsed_s)
        self._batches += 1
        self._batched_items += len(plan.items)
        self._on_update(done, now)
        self._admit_queued(now)
        return done

    # ---- load and stats -------------------------------------------------------------------

    def utilisation(self) -> float:
        """Predicted fraction of the device the running sessions need, as they are now."""
        active = [
            (st.spec, st.target_steps, st.period_factor) for st in self._streams.values() if not st.paused
        ]
        return self._load(active)

    def sustainable_fps(self, sessions: int, steps: int, frames_per_chunk: int, max_fps: float) -> float:
        """The rate to serve so that `sessions` sessions of `steps` steps are admitted together.

        `max_fps` (the model's rate) when they hold it within the utilisation bound; otherwise the
        highest whole rate they hold, never below 2: a laptop gets a smooth lower rate rather than
        refusals. Predicted load is proportional to fps (every session's demand scales with it
        and the expected batch size does not), so the limit is bound / (load at 1 fps).
        """
        if sessions < 1:
            raise ValueError(f"sessions must be >= 1, got {sessions}")
        at_1fps = SessionSpec("fps-probe", 1.0, frames_per_chunk, steps)
        limit = self.config.utilisation_bound / self._load([(at_1fps, steps, 1.0)] * sessions)
        if limit >= max_fps:
            return max_fps
        return float(max(2, int(limit)))

    def stats(self) -> dict[str, Any]:
        sessions: dict[str, dict[str, Any]] = {}
        for sid, st in self._streams.items():
            alive = self._clock - st.added_at
            sessions[sid] = {
                "fps": st.spec.fps,
                "effective_fps": st.effective_fps,
                "fps_delivered": st.frames_done / alive if alive > 0 else 0.0,
                "chunks": st.chunks_done,
                "misses": st.misses,
                "steps": st.target_steps,
                "paused": st.paused,
                "ttfc_s": None if st.first_chunk_at is None else st.first_chunk_at - st.added_at,
            }
        level, cut, factor = self.degrade_state()
        return {
            "sessions": sessions,
            "chunks": self._chunks,
            "misses": self._misses,
            "miss_rate": self._misses / self._chunks if self._chunks else 0.0,
            "frames": self._frames,
            "failed": list(self._failed),
            "queued": [q.session_id for q in self._queue],
            "utilisation": self.utilisation(),
            "degrade_level": level,
            "step_cut": cut,
            "degrade_factor": factor,
            "batches": self._batches,
            "mean_batch": self._batched_items / self._batches if self._batches else 0.0,
        }

    # ---- internals ------------------------------------------------------------------------

    def _tick(self, now: float) -> None:
        self._clock = max(self._clock, now)

    def _stream(self, session_id: str) -> StreamState:
        try:
            return self._streams[session_id]
        except KeyError:
            raise KeyError(f"unknown session {session_id!r}") from None

    def _admit(self, spec: SessionSpec, now: float) -> None:
        st = StreamState(
            spec, next(self._order), now, self.config.playout_delay_for(spec), self.config.lookahead_for(spec)
        )
        self._streams[spec.session_id] = st
        self._on_admit(st)

    def _admit_queued(self, now: float) -> None:
        """Admit queued sessions in order while the head fits (no overtaking: FIFO is fair)."""
        while self._queue:
            spec = self._queue[0]
            if self._refusal(len(self._streams) + 1, self._admission_load(spec)) is not None:
                return
            self._queue.popleft()
            self._admit(spec, now)
            self._from_queue.append(spec.session_id)

    def _admission_load(self, extra: SessionSpec) -> float:
        """Utilisation at full quality (nominal steps and fps) of every session plus `extra`.

        Paused sessions count: they keep their slot and may resume at any time.
        """
        specs = [st.spec for st in self._streams.values()] + [extra]
        return self._load([(spec, spec.steps, 1.0) for spec in specs])

    def _load(self, entries: Sequence[tuple[SessionSpec, int, float]]) -> float:
        """Predicted device seconds per second for sessions given as (spec, steps, period factor).

        Per kind, the sessions need `demand` items per second. One batch holds at most one item of
        a session and at most `_batch_limit()` items, so at least max(fastest session's rate,
        demand / limit) batches per second run, and the expected batch size is demand over that.
        U = demand x per-sample cost at that size, i.e. the sum over sessions of (steps + 1) x
        per-sample cost / chunk period. For sessions at one rate the expected size is simply
        min(sessions, limit); a fast session among slow ones mostly runs alone.
        """
        if not entries:
            return 0.0
        total = 0.0
        for kind in (DENOISE, COMMIT):
            rates = [
                (steps if kind == DENOISE else 1) / (spec.chunk_period * f) for spec, steps, f in entries
            ]
            demand = sum(rates)
            batches = max(max(rates), demand / self._batch_limit())
            total += demand * self._per_sample_at(kind, demand / batches)
        return total

    def _per_sample_at(self, kind: Kind, batch: float) -> float:
        """Per-sample cost at a (fractional) expected batch size, or at a smaller, cheaper one."""
        lo = max(int(batch), 1)
        predict = self.cost.predict
        at_batch = (predict(kind, lo) + (predict(kind, lo + 1) - predict(kind, lo)) * (batch - lo)) / batch
        return min(at_batch, self.cost.per_sample(kind, self.cost.max_useful_batch(kind, lo)))

    def _plan(self, streams: Iterable[StreamState], kind: Kind, now: float) -> StepPlan:
        items = tuple(st.mark_planned(now) for st in streams)
        return StepPlan(items, kind, self.cost.predict(kind, len(items)), now)
