"""simulate: drive a scheduler on a virtual clock with a synthetic batch cost.

The simulator plays the engine: it adds sessions at their arrival times, asks for a plan, lets
the virtual clock advance by `batch_cost(kind, batch_size)` (times a seeded random jitter),
reports the result with `update`, and idles until `next_release` when nothing is ready. Nothing
sleeps, so tests and benchmarks of minutes of streaming run in well under a second.

`events` are (time, callback(scheduler, time)) pairs run when the clock reaches them: pauses,
removals, or a change of the cost function (a closure the callback mutates).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from scheduler.base import SchedulerBase
from scheduler.types import Admission, ChunkDone, SessionSpec, StepResult

BatchCost = Callable[[str, int], float]
Event = Callable[[SchedulerBase, float], object]


@dataclass
class SimReport:
    """What happened in one simulated run."""

    duration_s: float
    chunks: list[ChunkDone]
    admissions: dict[str, Admission]
    arrivals: dict[str, float]
    admitted_at: dict[str, float]  # arrival time, or when the queue let the session in
    # Per session given to `simulate` (sessions added to the scheduler beforehand count in the
    # totals only): arrival to first chunk (including time spent queued), and frames delivered
    # per second since admission.
    ttfc: dict[str, float]
    per_session_fps: dict[str, float]
    misses: int
    miss_rate: float
    frames: int
    frames_per_s: float
    batches: int
    mean_batch: float
    busy_s: float
    stats: dict[str, Any] = field(default_factory=dict)

    def chunks_of(self, session_id: str) -> list[ChunkDone]:
        return [c for c in self.chunks if c.session_id == session_id]

    def misses_after(self, t: float) -> int:
        return sum(c.missed for c in self.chunks if c.finished_at > t)


def simulate(
    scheduler: SchedulerBase,
    sessions: Sequence[tuple[float, SessionSpec]],
    duration_s: float,
    batch_cost: BatchCost,
    jitter: float = 0.0,
    seed: int = 0,
    events: Sequence[tuple[float, Event]] = (),
) -> SimReport:
    """Run `scheduler` from t = 0 to `duration_s` and report misses, latency and throughput.

    `jitter` j scales each batch's cost by a uniform factor in [1 - j, 1 + j].
    """
    if not duration_s > 0:
        raise ValueError(f"duration_s must be > 0, got {duration_s}")
    if not 0 <= jitter < 1:
        raise ValueError(f"jitter must be in [0, 1), got {jitter}")
    rng = random.Random(seed)
    arrivals = {spec.session_id: t for t, spec in sessions}
    admissions: dict[str, Admission] = {}
    admitted_at: dict[str, float] = {}

    def arrive(spec: SessionSpec) -> Event:
        def add(sched: SchedulerBase, t: float) -> None:
            admissions[spec.session_id] = answer = sched.add_session(spec, t)
            if answer.admitted:
                admitted_at[spec.session_id] = t

        return add

    timeline = sorted([(t, arrive(spec)) for t, spec in sessions] + list(events), key=lambda entry: entry[0])
    chunks: list[ChunkDone] = []
    frames_of: dict[str, int] = {}
    first: dict[str, float] = {}
    now, next_event, busy, batches, items = 0.0, 0, 0.0, 0, 0
    while now < duration_s:
        while next_event < len(timeline) and timeline[next_event][0] <= now:
            t, action = timeline[next_event]
            action(scheduler, t)
            next_event += 1
        for sid in scheduler.admitted_from_queue():
            admitted_at[sid] = now
        plan = scheduler.schedule(now)
        if plan is None:
            release = scheduler.next_release(now)
            wake = [] if release is None else [release]
            if next_event < len(timeline):
                wake.append(timeline[next_event][0])
            if not wake:
                break
            now = min(wake)
            continue
        elapsed = batch_cost(plan.kind, plan.batch_size) * (1.0 + jitter * rng.uniform(-1.0, 1.0))
        now += elapsed
        busy += elapsed
        batches += 1
        items += plan.batch_size
        for chunk in scheduler.update(plan, StepResult(elapsed), now):
            chunks.append(chunk)
            per_chunk = scheduler.session_spec(chunk.session_id).frames_per_chunk
            frames_of[chunk.session_id] = frames_of.get(chunk.session_id, 0) + per_chunk
            first.setdefault(chunk.session_id, chunk.finished_at)

    misses = sum(c.missed for c in chunks)
    frames = sum(frames_of.values())
    return SimReport(
        duration_s=duration_s,
        chunks=chunks,
        admissions=admissions,
        arrivals=arrivals,
        admitted_at=admitted_at,
        ttfc={sid: t - arrivals[sid] for sid, t in first.items() if sid in arrivals},
        per_session_fps={
            sid: frames_of.get(sid, 0) / (duration_s - t) for sid, t in admitted_at.items() if t < duration_s
        },
        misses=misses,
        miss_rate=misses / len(chunks) if chunks else 0.0,
        frames=frames,
        frames_per_s=frames / duration_s,
        batches=batches,
        mean_batch=items / batches if batches else 0.0,
        busy_s=busy,
        stats=scheduler.stats(),
    )
