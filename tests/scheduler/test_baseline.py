"""SerialScheduler: one stream at a time, whole chunks, round robin, batch size 1."""

from __future__ import annotations

from scheduler import SchedulerConfig, SerialScheduler, StepResult

from .helpers import calibrated, run_plan, spec, tick


def test_runs_whole_chunks_round_robin_one_sample_at_a_time() -> None:
    sched = SerialScheduler(SchedulerConfig(), calibrated())
    for sid in "abc":
        sched.add_session(spec(sid, steps=2), 0.0)
    order = []
    now = 0.0
    for _ in range(9):
        plan, now = run_plan(sched, now)
        assert plan.batch_size == 1
        order.append((plan.session_ids[0], plan.kind))
    expected_chunk = ["denoise", "denoise", "commit"]
    assert order == [(sid, kind) for sid in "abc" for kind in expected_chunk]


def test_skips_sessions_not_yet_released_and_finishes_a_started_chunk_first() -> None:
    sched = SerialScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("a", steps=1), 0.0)
    _, now = run_plan(sched, 0.0)
    _, now = run_plan(sched, now)  # a's first chunk is done; its next is not released yet
    sched.add_session(spec("b", steps=1), now)
    plan, now = run_plan(sched, now)
    assert plan.session_ids == ("b",)  # "a" is at the head of the queue but not ready
    sched.pause("b", now)  # b paused mid-chunk
    idle, now = tick(sched, now)  # idles until a's release, then a runs
    assert idle is None
    started, now = tick(sched, now)
    assert started is not None and started.session_ids == ("a",)
    sched.resume("b", now)
    first = sched.schedule(now)
    assert first is not None and first.session_ids == ("a",)  # a's started chunk goes first
    sched.update(first, StepResult(0.01), now + 0.01)
    last, now = run_plan(sched, now + 0.01)
    assert last.session_ids == ("b",) and last.kind == "commit"


def test_a_failed_session_leaves_the_rotation() -> None:
    sched = SerialScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("a"), 0.0)
    sched.add_session(spec("b"), 0.0)
    plan = sched.schedule(0.0)
    assert plan is not None and plan.session_ids == ("a",)
    sched.update(plan, StepResult(0.01, failed_sessions=("a",)), 0.01)
    sched.remove_session("b", 0.01)
    assert sched.schedule(0.01) is None and sched.stats()["failed"] == ["a"]
