"""The virtual-clock simulator: what it drives and what it reports."""

from __future__ import annotations

import pytest

from scheduler import SchedulerBase, SchedulerConfig, StepScheduler, simulate

from .helpers import affine_cost, calibrated, spec


def test_rejects_bad_arguments() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    with pytest.raises(ValueError, match="duration_s"):
        simulate(sched, [], 0.0, affine_cost())
    with pytest.raises(ValueError, match="jitter"):
        simulate(sched, [], 1.0, affine_cost(), jitter=1.0)


def test_nothing_to_do_ends_at_once() -> None:
    report = simulate(StepScheduler(SchedulerConfig(), calibrated()), [], 10.0, affine_cost())
    assert (report.batches, report.frames, report.miss_rate, report.mean_batch) == (0, 0, 0.0, 0.0)
    assert report.chunks == [] and report.frames_per_s == 0.0


def test_report_figures() -> None:
    arrivals = [(0.0, spec("a")), (1.0, spec("b", frames=4, fps=24.0))]
    report = simulate(StepScheduler(SchedulerConfig(), calibrated()), arrivals, 5.0, affine_cost())
    assert report.arrivals == {"a": 0.0, "b": 1.0} and report.admitted_at == {"a": 0.0, "b": 1.0}
    a, b = report.chunks_of("a"), report.chunks_of("b")
    assert report.frames == 2 * len(a) + 4 * len(b)
    assert report.frames_per_s == pytest.approx(report.frames / 5.0)
    assert report.per_session_fps["b"] == pytest.approx(4 * len(b) / 4.0)
    assert report.ttfc["b"] == pytest.approx(b[0].finished_at - 1.0)
    assert report.misses == report.misses_after(0.0) == 0
    assert report.busy_s < 5.0 and report.batches > 0


def test_idles_until_events_and_releases() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())

    def pause(s: SchedulerBase, t: float) -> None:
        s.pause("a", t)

    def resume(s: SchedulerBase, t: float) -> None:
        s.resume("a", t)

    report = simulate(sched, [(0.0, spec("a"))], 6.0, affine_cost(), events=[(1.0, pause), (4.0, resume)])
    gap = [c.finished_at for c in report.chunks if 1.2 < c.finished_at < 4.0]
    assert gap == []
    assert any(c.finished_at > 4.0 for c in report.chunks)
    assert report.misses == 0  # the resumed clock starts afresh


def test_queued_sessions_are_admitted_during_the_run() -> None:
    sched = StepScheduler(SchedulerConfig(max_sessions=1, queue_when_full=True), calibrated())

    def leave(s: SchedulerBase, t: float) -> None:
        s.remove_session("a", t)

    report = simulate(sched, [(0.0, spec("a")), (0.5, spec("b"))], 3.0, affine_cost(), events=[(1.0, leave)])
    assert report.admissions["b"].queue_position == 1
    assert report.admitted_at["b"] == pytest.approx(1.0, abs=0.05)
    assert report.ttfc["b"] > 0.5  # counted from arrival, so it includes the wait in the queue


def test_seeded_jitter_is_reproducible() -> None:
    def run(seed: int) -> list[float]:
        sched = StepScheduler(SchedulerConfig(), calibrated())
        report = simulate(sched, [(0.0, spec("a"))], 2.0, affine_cost(), jitter=0.3, seed=seed)
        return [c.finished_at for c in report.chunks]

    assert run(1) == run(1) != run(2)


def test_sessions_added_beforehand_count_in_the_totals_only() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    sched.add_session(spec("early"), 0.0)
    report = simulate(sched, [], 2.0, affine_cost())
    assert report.frames > 0 and report.ttfc == {} and report.per_session_fps == {}
