"""StepScheduler: deadline-aware batching of denoising steps across many video sessions.

Each call to `schedule(now)` plans one model call:
1. the ready sessions (released, not paused, not already in a plan) are sorted earliest deadline
   first; the batch kind is the kind of the most urgent session's next item (denoise and commit
   items never share a batch), except that commits with ample slack wait while denoise items
   are ready, so that sessions commit together instead of one by one;
2. sessions whose next item has that kind join in deadline order up to the batch size with the
   lowest per-sample cost the cost model predicts (adding samples only while it pays); when too
   few are ready, sessions due for release within `early_start` start early to fill the batch
   (unless the batch holds a first chunk, which must not be slowed). Sessions that arrived at
   different phases thereby fall into step and later rounds run as full batches;
3. any further one that would miss its deadline if it waited for the next batch joins anyway,
   up to `max_batch`.
A new session's first chunk is due the moment it arrives, so it heads the very next plan.
A plan runs to completion: preemption happens only at step boundaries, between plans.

Admission control predicts the utilisation U = sum over sessions of (steps + 1) * per-sample
cost / chunk period, at the batch size the sessions would make (see `SchedulerBase._load`), and
refuses (or queues) the session that would push U over `utilisation_bound`. The overload policy
is `DegradeController`.
"""

from __future__ import annotations

from scheduler.base import SchedulerBase
from scheduler.config import SchedulerConfig
from scheduler.cost_model import CostModel
from scheduler.degrade import DegradeController
from scheduler.stream import EPS, StreamState
from scheduler.types import COMMIT, DENOISE, ChunkDone, Kind, StepPlan


class StepScheduler(SchedulerBase):
    """Earliest-deadline-first step batching with admission control and fair degradation."""

    def __init__(self, config: SchedulerConfig | None = None, cost: CostModel | None = None) -> None:
        super().__init__(config, cost)
        self._degrade = DegradeController(self.config)

    def schedule(self, now: float) -> StepPlan | None:
        self._tick(now)
        ready = sorted(
            (st for st in self._streams.values() if st.is_ready(now)),
            key=lambda st: (st.deadline(), st.order),
        )
        if not ready:
            return None
        kind = ready[0].next_kind()
        if kind == COMMIT and self._defer_commits(ready, now):
            kind = DENOISE
        candidates = [st for st in ready if st.next_kind() == kind]
        pool = candidates
        if not any(st.starting for st in candidates):
            # Fill the batch with sessions due to start soon, unless that would slow a first chunk.
            pool = candidates + sorted(
                (st for st in self._streams.values() if self._may_start_early(st, kind, now)),
                key=lambda st: (st.release(), st.order),
            )
        max_batch = self.config.max_batch
        batch = pool[: self.cost.max_useful_batch(kind, min(len(pool), max_batch))]
        for st in candidates[len(batch) :]:
            if len(batch) >= max_batch:
                break
            if self._late_if_skipped(st, kind, len(batch), now):
                batch.append(st)
        return self._plan(batch, kind, now)

    def _defer_commits(self, ready: list[StreamState], now: float) -> bool:
        """Run denoise steps before the ready commits, so that commits fall into one batch?

        Denoise items at any step batch together, commits only with commits: sessions whose
        chunks started a few batches apart would otherwise commit one by one, every round.
        Deferring is allowed only for commits that keep twice the predicted wait as slack, and
        never for a first chunk.
        """
        denoise = sum(st.next_kind() == DENOISE for st in ready)
        if not denoise:
            return False
        commits = [st for st in ready if st.next_kind() == COMMIT]
        wait = 2 * self.cost.predict(DENOISE, min(denoise, self.config.max_batch))
        after = now + wait + self.cost.predict(COMMIT, min(len(commits) + denoise, self.config.max_batch))
        return not any(st.starting or after > st.deadline() for st in commits)

    def _may_start_early(self, st: StreamState, kind: Kind, now: float) -> bool:
        """May `st`, not yet released, start now to fill a batch of `kind`?"""
        if st.paused or st.in_flight or st.next_kind() != kind:
            return False
        release = st.release()
        return now + EPS < release <= now + self.config.early_start_for(st.spec)

    def _late_if_skipped(self, st: StreamState, kind: Kind, batch: int, now: float) -> bool:
        """Would `st` miss its deadline if it waited for the batch being planned to finish?"""
        after = now + self.cost.predict(kind, batch)
        return self._finish_estimate(st, batch + 1, after) > st.deadline()

    def _finish_estimate(self, st: StreamState, batch: int, start: float) -> float:
        """When `st`'s chunk would finish if its remaining items ran from `start` in batches of `batch`."""
        cost = self.cost
        return start + st.remaining_denoise() * cost.predict(DENOISE, batch) + cost.predict(COMMIT, batch)

    # ---- admission ------------------------------------------------------------------------

    def _batch_limit(self) -> int:
        return self.config.max_batch

    def _refusal(self, sessions: int, utilisation: float) -> str | None:
        reason = super()._refusal(sessions, utilisation)
        # An idle server always takes its first session: refusing it serves nobody, and the
        # overload policy then lowers its steps or frame rate until it holds.
        if reason is None and sessions > 1 and utilisation > self.config.utilisation_bound:
            reason = (
                f"predicted utilisation {utilisation:.2f} > bound {self.config.utilisation_bound:.2f}"
                f" with {sessions} sessions"
            )
        return reason

    # ---- overload -------------------------------------------------------------------------

    def _on_admit(self, stream: StreamState) -> None:
        self._apply_degrade(stream, stream.added_at)
        self._degrade.grace(stream.added_at, 2 * stream.period)

    def resume(self, session_id: str, now: float) -> None:
        super().resume(session_id, now)
        self._degrade.grace(now, 2 * self._stream(session_id).period)

    def _on_update(self, done: list[ChunkDone], now: float) -> None:
        if not self.config.degrade:
            return
        max_cut = max((st.spec.steps - st.spec.min_steps for st in self._streams.values()), default=0)
        if self._degrade.evaluate(now, done, self._load_at, max_cut):
            for st in self._streams.values():
                self._apply_degrade(st, now)

    def _on_removed(self) -> None:
        if not self._streams:
            self._degrade.reset()

    def _load_at(self, step_cut: int, stretch_level: int) -> float:
        factor = self.config.stretch_step**stretch_level
        active = [
            (st.spec, max(st.spec.min_steps, st.spec.steps - step_cut), factor)
            for st in self._streams.values()
            if not st.paused
        ]
        return self._load(active)

    def _apply_degrade(self, st: StreamState, now: float) -> None:
        st.target_steps = max(st.spec.min_steps, st.spec.steps - self._degrade.step_cut)
        st.rebase(self._degrade.factor, now)

    def degrade_state(self) -> tuple[int, int, float]:
        return self._degrade.level, self._degrade.step_cut, self._degrade.factor
