"""StepScheduler: batching policy, deadlines, preemption, pause/resume, failures, stats."""

from __future__ import annotations

import pytest

from scheduler import SchedulerConfig, SerialScheduler, StepResult, StepScheduler, simulate

from .helpers import RecordingStepScheduler, affine_cost, calibrated, run_plan, spec, tick


@pytest.mark.parametrize(
    ("sessions", "a", "c"),
    [(4, 0.010, 0.004), (8, 0.004, 0.002)],
    ids=["4-sessions-10ms+4ms", "8-sessions-4ms+2ms"],
)
def test_batching_meets_every_deadline_where_serial_misses(sessions: int, a: float, c: float) -> None:
    arrivals = [(0.05 * i, spec(f"s{i}")) for i in range(sessions)]
    config = SchedulerConfig(max_sessions=32)
    step = simulate(StepScheduler(config, calibrated(a, c)), arrivals, 20.0, affine_cost(a, c), jitter=0.1)
    serial = simulate(
        SerialScheduler(config, calibrated(a, c)), arrivals, 20.0, affine_cost(a, c), jitter=0.1
    )
    assert all(adm.admitted for adm in step.admissions.values())
    assert step.misses == 0
    assert step.stats["degrade_level"] == 0
    assert min(step.per_session_fps.values()) > 11.5  # every session streams at its 12 fps
    assert step.mean_batch > 2
    assert serial.miss_rate > 0.5
    assert step.frames_per_s > serial.frames_per_s
    assert max(step.ttfc.values()) < 0.2


def test_new_session_is_in_the_very_next_plan_while_others_stream() -> None:
    sched = RecordingStepScheduler(SchedulerConfig(), calibrated())
    arrivals = [(0.0, spec("a")), (0.0, spec("b")), (0.0, spec("c")), (2.0, spec("new"))]
    report = simulate(sched, arrivals, 3.0, affine_cost())
    first_after = next(p for p in sched.plans if p.planned_at >= 2.0)
    assert "new" in first_after.session_ids
    assert all("new" not in p.session_ids for p in sched.plans if p.planned_at < 2.0)
    assert report.ttfc["new"] < 0.2


def test_plans_never_mix_kinds_respect_max_batch_and_hold_a_session_once() -> None:
    sched = RecordingStepScheduler(SchedulerConfig(max_batch=3), calibrated(0.02, 0.001))
    arrivals = [(0.01 * i, spec(f"s{i}")) for i in range(6)]
    simulate(sched, arrivals, 5.0, affine_cost(0.02, 0.001))
    assert {p.kind for p in sched.plans} == {"denoise", "commit"}
    for plan in sched.plans:
        assert 1 <= plan.batch_size <= 3
        assert all(item.kind == plan.kind for item in plan.items)
        assert len(set(plan.session_ids)) == plan.batch_size
        assert plan.predicted_s == pytest.approx(0.02 + 0.001 * plan.batch_size)


def test_earliest_deadline_first() -> None:
    sched = StepScheduler(SchedulerConfig(max_batch=1), calibrated())
    for name, t in (("a", 0.0), ("c", 0.05), ("b", 0.1)):
        sched.add_session(spec(name, steps=1), t)
    order = []
    now = 0.2
    for _ in range(6):  # each first chunk: one denoise step and a commit
        plan, now = run_plan(sched, now)
        order.append(plan.session_ids[0])
    assert order == ["a", "a", "c", "c", "b", "b"]


def test_preemption_only_at_step_boundaries() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("a"), 0.0)
    running = sched.schedule(0.0)
    assert running is not None and running.session_ids == ("a",)
    assert sched.schedule(0.001) is None  # "a" is in flight: it cannot be planned twice
    assert sched.next_release(0.001) is None
    sched.add_session(spec("urgent"), 0.002)
    assert running.session_ids == ("a",)  # a plan is never changed once made
    concurrent = sched.schedule(0.003)  # an engine that pipelines gets a disjoint plan
    assert concurrent is not None and concurrent.session_ids == ("urgent",)
    sched.update(running, StepResult(0.014), 0.014)
    sched.update(concurrent, StepResult(0.014), 0.017)
    nxt = sched.schedule(0.017)
    assert nxt is not None and set(nxt.session_ids) == {"a", "urgent"}


def test_an_item_that_would_miss_is_added_even_when_batching_does_not_pay() -> None:
    linear = calibrated(0.0, 0.004)  # no fixed cost: a bigger batch is not cheaper per sample
    sched = RecordingStepScheduler(SchedulerConfig(), linear)
    report = simulate(sched, [(0.0, spec("a")), (0.0, spec("b"))], 2.0, affine_cost(0.0, 0.004))
    assert sched.plans[0].batch_size == 2  # both first chunks are due now: neither may wait
    later = [p.batch_size for p in sched.plans if p.planned_at > 0.5]
    assert later and max(later) == 1  # with slack, the saturated device runs one at a time
    assert report.misses == 0


def test_max_batch_caps_urgent_additions() -> None:
    sched = StepScheduler(SchedulerConfig(max_batch=2), calibrated(0.0, 0.004))
    for name in "abc":
        sched.add_session(spec(name), 0.0)
    plan = sched.schedule(0.0)
    assert plan is not None and plan.session_ids == ("a", "b")


def test_early_start_aligns_sessions_into_fuller_batches() -> None:
    a, c = 0.02, 0.001  # launch-bound: batching is nearly free
    arrivals = [(0.021 * i, spec(f"s{i}")) for i in range(8)]
    aligned = simulate(StepScheduler(SchedulerConfig(), calibrated(a, c)), arrivals, 10.0, affine_cost(a, c))
    strict = simulate(
        StepScheduler(SchedulerConfig(early_start=0.0), calibrated(a, c)), arrivals, 10.0, affine_cost(a, c)
    )
    # At 0.84 predicted utilisation there is no room for sessions that never fall into step.
    assert aligned.misses == 0 and aligned.mean_batch > 5
    assert strict.misses > 10


def test_pause_and_resume() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("a"), 0.0)
    sched.add_session(spec("b"), 0.0)
    now = 0.0
    while sched.stats()["sessions"]["b"]["chunks"] < 2:
        _, now = tick(sched, now)
    sched.pause("b", now)
    assert sched.stats()["sessions"]["b"]["paused"]
    for _ in range(40):
        plan, now = tick(sched, now)
        assert plan is None or "b" not in plan.session_ids
    sched.pause("a", now)
    assert sched.schedule(now) is None and sched.next_release(now) is None
    resumed_at = now + 5.0  # after a long pause: due at once, and not a miss
    sched.resume("b", resumed_at)
    plan = sched.schedule(resumed_at)
    assert plan is not None and plan.session_ids == ("b",)
    t = resumed_at + 0.02
    finished = sched.update(plan, StepResult(0.02), t)
    while not finished:
        plan = sched.schedule(t)
        assert plan is not None and plan.session_ids == ("b",)
        t += 0.02
        finished = sched.update(plan, StepResult(0.02), t)
    assert finished[0].deadline == resumed_at and not finished[0].missed
    with pytest.raises(KeyError, match="nope"):
        sched.pause("nope", t)


def test_failed_sessions_are_removed_and_reported() -> None:
    cost = calibrated()
    sched = StepScheduler(SchedulerConfig(), cost)
    sched.add_session(spec("a"), 0.0)
    sched.add_session(spec("b"), 0.0)
    plan = sched.schedule(0.0)
    assert plan is not None and plan.batch_size == 2
    seen = cost.observations("denoise", 2)
    assert sched.update(plan, StepResult(0.02, failed_sessions=("a", "ghost")), 0.02) == []
    assert sched.session_ids == ("b",)
    assert sched.stats()["failed"] == ["a"]
    assert cost.observations("denoise", 2) == seen  # a failed batch's time teaches nothing
    nxt = sched.schedule(0.02)
    assert nxt is not None and nxt.items[0].step_index == 1  # "b" advanced


def test_update_skips_sessions_removed_while_their_plan_ran() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("a"), 0.0)
    sched.add_session(spec("b"), 0.0)
    plan = sched.schedule(0.0)
    assert plan is not None
    sched.remove_session("a", 0.01)
    sched.add_session(spec("a"), 0.01)  # re-added under the same id: the old item is not its own
    sched.update(plan, StepResult(0.02), 0.02)
    fresh = sched.schedule(0.02)
    assert fresh is not None
    steps = {item.session_id: item.step_index for item in fresh.items}
    assert steps == {"a": 0, "b": 1}


def test_a_replayed_plan_is_rejected() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("a"), 0.0)
    plan, now = run_plan(sched, 0.0)
    sched.schedule(now)
    with pytest.raises(ValueError, match="does not match"):
        sched.update(plan, StepResult(0.01), now + 0.01)


def test_next_release() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    assert sched.next_release(0.0) is None
    sched.add_session(spec("a", steps=1), 0.0)
    assert sched.next_release(0.5) == 0.5  # ready now
    _, now = run_plan(sched, 0.0)
    _, now = run_plan(sched, now)  # chunk 0 delivered at t0 = now
    assert sched.schedule(now) is None
    assert sched.next_release(now) == pytest.approx(now + 0.5 * (2 / 12))


def test_stats_and_utilisation() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    assert sched.utilisation() == 0.0
    assert sched.stats()["mean_batch"] == 0.0 and sched.stats()["miss_rate"] == 0.0
    sched.add_session(spec("a"), 0.0)
    assert sched.stats()["sessions"]["a"]["fps_delivered"] == 0.0
    assert sched.stats()["sessions"]["a"]["ttfc_s"] is None
    report = simulate(sched, [], 2.0, affine_cost())
    stats = report.stats
    a = stats["sessions"]["a"]
    assert a["chunks"] == stats["chunks"] > 0 and a["misses"] == 0
    assert a["steps"] == 4 and a["effective_fps"] == 12.0 and not a["paused"]
    assert a["ttfc_s"] == pytest.approx(5 * 0.014)
    assert 10.0 < a["fps_delivered"] < 14.0
    assert stats["frames"] == 2 * stats["chunks"]
    assert stats["utilisation"] == pytest.approx(5 * 0.014 / (2 / 12))
    assert stats["degrade_level"] == 0 and stats["degrade_factor"] == 1.0
    assert stats["batches"] > 0 and stats["mean_batch"] == 1.0
    assert sched.effective_fps("a") == 12.0
    assert sched.degrade_level == 0
