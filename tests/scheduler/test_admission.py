"""Admission control: the utilisation bound, the session limit, and the waiting queue."""

from __future__ import annotations

import pytest

from scheduler import SchedulerConfig, SerialScheduler, StepResult, StepScheduler

from .helpers import affine_cost, calibrated, spec


def test_refuses_exactly_the_session_that_would_push_utilisation_over_the_bound() -> None:
    # 10 ms + 4 ms/sample per step, 5 batches per chunk of 1/6 s: U(n) = 30 * (0.010 + 0.004 n)
    sched = StepScheduler(SchedulerConfig(), calibrated())
    answers = [sched.add_session(spec(f"s{i}"), 0.0) for i in range(5)]
    assert [a.admitted for a in answers] == [True, True, True, True, False]
    assert answers[3].utilisation == pytest.approx(0.78)
    refused = answers[4]
    assert refused.utilisation == pytest.approx(0.90)
    assert refused.reason == "predicted utilisation 0.90 > bound 0.85 with 5 sessions"
    assert refused.queue_position is None
    assert sched.session_ids == ("s0", "s1", "s2", "s3")
    # A lighter session (half the chunk rate) still fits under the bound.
    light = sched.add_session(spec("light", fps=6.0), 0.0)
    assert light.admitted and light.utilisation <= 0.85
    assert light.reason.startswith("admitted: predicted utilisation")


def test_measured_batches_lift_a_pessimistic_calibration() -> None:
    # Calibrated twice as slow as the device is: U(2) = 60 * 0.018 = 1.08, so only one fits.
    sched = StepScheduler(SchedulerConfig(), calibrated(0.020, 0.008))
    assert sched.add_session(spec("s0"), 0.0).admitted
    assert not sched.add_session(spec("early"), 0.0).admitted
    truth, now = affine_cost(), 0.0
    while now < 3.0:  # one stream runs at batch size 1 only, at the device's true cost
        plan = sched.schedule(now)
        if plan is None:
            release = sched.next_release(now)
            assert release is not None
            now = release
            continue
        elapsed = truth(plan.kind, plan.batch_size)
        sched.update(plan, StepResult(elapsed), now + elapsed)
        now += elapsed
    # The true figures: U(n) = 30 * (0.010 + 0.004 n), so four fit the bound and a fifth does not.
    answers = [sched.add_session(spec(f"s{i}"), now) for i in range(1, 5)]
    assert [a.admitted for a in answers] == [True, True, True, False]
    assert answers[-1].utilisation == pytest.approx(0.90, rel=0.02)


def test_session_limit() -> None:
    sched = StepScheduler(SchedulerConfig(max_sessions=2), calibrated(0.001, 0.0001))
    assert sched.add_session(spec("a"), 0.0).admitted
    assert sched.add_session(spec("b"), 0.0).admitted
    answer = sched.add_session(spec("c"), 0.0)
    assert not answer.admitted and answer.reason == "session limit: 3 sessions > max_sessions 2"


def test_duplicate_ids_are_rejected() -> None:
    sched = StepScheduler(SchedulerConfig(max_sessions=1, queue_when_full=True), calibrated())
    sched.add_session(spec("a"), 0.0)
    sched.add_session(spec("q"), 0.0)
    for sid in ("a", "q"):
        with pytest.raises(ValueError, match="already exists"):
            sched.add_session(spec(sid), 0.0)


def test_paused_sessions_keep_their_share() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    for i in range(4):
        sched.add_session(spec(f"s{i}"), 0.0)
        sched.pause(f"s{i}", 0.0)
    assert sched.utilisation() == 0.0
    assert not sched.add_session(spec("s4"), 0.0).admitted


def test_queue_reports_positions_and_admits_in_order_when_sessions_leave() -> None:
    sched = StepScheduler(SchedulerConfig(queue_when_full=True), calibrated())
    for i in range(4):
        assert sched.add_session(spec(f"s{i}"), 0.0).admitted
    first = sched.add_session(spec("q1"), 0.0)
    second = sched.add_session(spec("q2"), 0.0)
    assert (first.admitted, first.queue_position) == (False, 1)
    assert first.reason.startswith("predicted utilisation 0.90")
    assert (second.admitted, second.queue_position) == (False, 2)
    assert second.reason == "1 session(s) queued before it"
    assert sched.stats()["queued"] == ["q1", "q2"]
    assert sched.admitted_from_queue() == []
    sched.remove_session("s0", 1.0)
    assert sched.admitted_from_queue() == ["q1"]
    assert sched.admitted_from_queue() == []  # reported once
    assert "q1" in sched.session_ids and sched.stats()["queued"] == ["q2"]
    plan = sched.schedule(1.0)
    assert plan is not None and "q1" in plan.session_ids  # its first chunk is due at admission
    sched.remove_session("q2")  # a queued session can leave the queue
    sched.remove_session("never-there")
    assert sched.stats()["queued"] == []


def test_queue_is_first_in_first_out() -> None:
    sched = StepScheduler(SchedulerConfig(max_sessions=2, queue_when_full=True), calibrated(0.001, 0.0001))
    for sid in "abcd":
        sched.add_session(spec(sid), 0.0)
    assert sched.stats()["queued"] == ["c", "d"]
    sched.remove_session("a", 0.5)
    assert sched.admitted_from_queue() == ["c"] and sched.stats()["queued"] == ["d"]


def test_a_failure_admits_from_the_queue() -> None:
    sched = StepScheduler(SchedulerConfig(max_sessions=1, queue_when_full=True), calibrated())
    sched.add_session(spec("a"), 0.0)
    sched.add_session(spec("b"), 0.0)
    plan = sched.schedule(0.0)
    assert plan is not None
    sched.update(plan, StepResult(0.01, failed_sessions=("a",)), 0.01)
    assert sched.admitted_from_queue() == ["b"] and sched.session_ids == ("b",)


def test_serial_baseline_admits_everyone_up_to_the_session_limit() -> None:
    sched = SerialScheduler(SchedulerConfig(max_sessions=6), calibrated())
    answers = [sched.add_session(spec(f"s{i}"), 0.0) for i in range(7)]
    assert all(a.admitted for a in answers[:6])
    assert answers[5].utilisation > 1.0  # one stream at a time cannot keep up, but it admits
    assert answers[6].reason == "session limit: 7 sessions > max_sessions 6"


def test_an_idle_scheduler_always_admits_its_first_session() -> None:
    # 0.2 s per step: one 12 fps session alone needs utilisation 6, far over the bound.
    sched = StepScheduler(SchedulerConfig(), calibrated(0.2, 0.0))
    first = sched.add_session(spec("a"), 0.0)
    assert first.admitted and first.utilisation > 1.0
    second = sched.add_session(spec("b"), 0.0)
    assert not second.admitted and "> bound" in second.reason
    sched.remove_session("a", 1.0)
    assert sched.add_session(spec("b"), 1.0).admitted  # idle again


@pytest.mark.parametrize(
    ("sessions", "expected"),
    [
        (1, 24.0),  # U = 0.035 fps: one stream holds 24.3 fps, so it gets the model's 24
        (4, 13.0),  # U = 0.065 fps: 13.1 fps holdable, served at a whole 13
        (8, 8.0),  # U = 0.105 fps: 8.1 fps
    ],
)
def test_the_sustainable_rate_admits_exactly_that_many_sessions(sessions: int, expected: float) -> None:
    sched = StepScheduler(SchedulerConfig(max_sessions=16), calibrated())
    fps = sched.sustainable_fps(sessions, 4, 2, 24.0)
    assert fps == expected
    answers = [sched.add_session(spec(f"s{i}", fps=fps), 0.0) for i in range(sessions + 1)]
    assert [a.admitted for a in answers[:sessions]] == [True] * sessions
    if fps < 24.0:  # below the model's rate the next session no longer fits
        assert not answers[sessions].admitted


def test_the_serial_baseline_holds_a_lower_rate_for_the_same_sessions() -> None:
    # One sample per batch: 4 sessions x fps/2 chunks/s x 5 batches of 14 ms, U = 0.14 fps: 6.07 fps
    sched = SerialScheduler(SchedulerConfig(), calibrated())
    assert sched.sustainable_fps(4, 4, 2, 24.0) == 6.0


def test_hopeless_hardware_still_gets_two_fps_not_a_refusal() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated(1.0, 0.0))
    assert sched.sustainable_fps(1, 4, 2, 24.0) == 2.0
    with pytest.raises(ValueError, match="sessions must be >= 1"):
        sched.sustainable_fps(0, 4, 2, 24.0)
