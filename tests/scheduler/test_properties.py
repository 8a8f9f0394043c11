"""Properties over random session mixes and random control sequences (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import SchedulerConfig, SessionSpec, StepResult, StepScheduler, simulate

from .helpers import affine_cost, calibrated

DURATION = 8.0

session_mix = st.lists(
    st.tuples(
        st.floats(0.0, 2.0),  # arrival
        st.sampled_from([6.0, 8.0, 12.0, 16.0]),  # fps
        st.sampled_from([1, 2, 4]),  # frames per chunk
        st.integers(1, 6),  # steps
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=25, deadline=None, database=None)
@given(
    mix=session_mix,
    fixed=st.floats(0.001, 0.02),
    per_sample=st.floats(0.0005, 0.005),
    seed=st.integers(0, 1000),
)
def test_every_chunk_arrives_in_order_and_no_session_starves(
    mix: list[tuple[float, float, int, int]], fixed: float, per_sample: float, seed: int
) -> None:
    arrivals = [
        (t, SessionSpec(f"s{i}", fps, frames, steps)) for i, (t, fps, frames, steps) in enumerate(mix)
    ]
    specs = {s.session_id: s for _, s in arrivals}
    sched = StepScheduler(SchedulerConfig(max_batch=8), calibrated(fixed, per_sample))
    report = simulate(sched, arrivals, DURATION, affine_cost(fixed, per_sample), jitter=0.1, seed=seed)
    factor = report.stats["degrade_factor"]
    rates = []
    admitted = [sid for sid, answer in report.admissions.items() if answer.admitted]
    assert {c.session_id for c in report.chunks} <= set(admitted)
    for sid in admitted:
        chunks = report.chunks_of(sid)
        assert [c.chunk_index for c in chunks] == list(range(len(chunks)))
        assert all(a.finished_at <= b.finished_at for a, b in zip(chunks, chunks[1:], strict=False))
        period = specs[sid].chunk_period
        # Served up to the end: nobody is left waiting while others stream.
        assert DURATION - chunks[-1].finished_at < 3 * period * factor + 0.5
        if len(chunks) >= 8:  # chunks per (nominal) chunk period, 1.0 = full rate
            rates.append((len(chunks) - 1) * period / (chunks[-1].finished_at - chunks[0].finished_at))
    if len(rates) >= 2:
        assert max(rates) <= 1.25 * min(rates)


operations = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove", "pause", "resume", "fail", "run", "run", "run"]),
        st.integers(0, 5),  # which session
        st.floats(0.001, 0.05),  # how long a batch takes
    ),
    max_size=80,
)


@settings(max_examples=40, deadline=None, database=None)
@given(ops=operations, queue=st.booleans())
def test_plans_stay_well_formed_under_any_control_sequence(
    ops: list[tuple[str, int, float]], queue: bool
) -> None:
    sched = StepScheduler(SchedulerConfig(max_batch=3, max_sessions=4, queue_when_full=queue), calibrated())
    now = 0.0
    next_chunk: dict[str, int] = {}
    known: set[str] = set()
    for op, n, elapsed in ops:
        sid = f"s{n}"
        if op == "add" and sid not in known:
            known.add(sid)
            sched.add_session(SessionSpec(sid, 12.0, 2, 1 + n % 4), now)
        elif op == "remove":
            sched.remove_session(sid, now)
            known.discard(sid)
            next_chunk.pop(sid, None)
        elif op in ("pause", "resume") and sid in sched.session_ids:
            getattr(sched, op)(sid, now)
        else:
            plan = sched.schedule(now)
            if plan is None:
                release = sched.next_release(now)
                now = now + elapsed if release is None else max(release, now)
                continue
            assert 1 <= plan.batch_size <= 3
            assert len(set(plan.session_ids)) == plan.batch_size
            assert all(item.kind == plan.kind for item in plan.items)
            failed = (sid,) if op == "fail" and sid in plan.session_ids else ()
            now += elapsed
            for chunk in sched.update(plan, StepResult(elapsed, failed), now):
                assert chunk.chunk_index == next_chunk.get(chunk.session_id, 0)
                next_chunk[chunk.session_id] = chunk.chunk_index + 1
            known -= set(failed)
            for gone in failed:  # a failed session is removed: its id may be added again, from chunk 0
                next_chunk.pop(gone, None)
        for admitted in sched.admitted_from_queue():
            assert admitted in known
        assert set(sched.session_ids) <= known
