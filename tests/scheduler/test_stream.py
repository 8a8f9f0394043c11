"""StreamState: the playback clock (deadlines, releases, re-anchoring) and chunk progress."""

from __future__ import annotations

import pytest

from scheduler.stream import StreamState

from .helpers import spec

PERIOD = 2 / 12


def make(steps: int = 2) -> StreamState:
    return StreamState(spec("a", steps=steps), 0, 10.0, playout_delay=PERIOD, lookahead=1.5 * PERIOD)


def run_chunk(st: StreamState, start: float, step_s: float = 0.01) -> float:
    """Plan and finish every item of the current chunk; returns the finish time."""
    now = start
    while True:
        item = st.mark_planned(now)
        now += step_s
        if st.advance(item, step_s, now) is not None:
            return now


def test_first_chunk_is_due_at_arrival_and_never_missed() -> None:
    st = make()
    assert st.starting and st.deadline() == 10.0 and st.release() == 10.0
    st.mark_planned(10.0)
    st.advance(st.next_item(), 0.5, 10.5)
    st.mark_planned(10.5)
    st.advance(st.next_item(), 0.5, 11.0)
    st.mark_planned(11.0)
    done = st.advance(st.next_item(), 0.5, 11.5)
    assert done is not None and done.chunk_index == 0
    assert not done.missed and done.deadline == 10.0
    assert done.compute_s == pytest.approx(1.5)
    assert st.first_chunk_at == 11.5 and not st.starting


def test_deadlines_follow_the_playback_clock() -> None:
    st = make()
    t0 = run_chunk(st, 10.0)
    assert st.deadline() == pytest.approx(t0 + PERIOD + PERIOD)  # chunk 1: t0 + 1 period + playout
    assert st.release() == pytest.approx(st.deadline() - 1.5 * PERIOD)
    assert not st.is_ready(t0)  # released only 0.5 periods after t0
    assert st.is_ready(st.release())
    finished = run_chunk(st, st.release())
    assert st.deadline() == pytest.approx(t0 + 3 * PERIOD)
    assert st.chunks_done == 2 and st.frames_done == 4 and finished > t0


def test_late_chunk_is_missed_and_queue_delay_is_measured() -> None:
    st = make()
    t0 = run_chunk(st, 10.0)
    late_start = st.deadline() + 0.1
    st.mark_planned(late_start)
    assert st.chunk_steps == 2
    now = late_start
    done = None
    while done is None:
        now += 0.01
        done = st.advance(st.next_item(), 0.01, now)
        if done is None:
            st.mark_planned(now)
    assert done.missed and st.misses == 1
    assert done.queue_delay_s == pytest.approx(late_start - (t0 + 0.5 * PERIOD))


def test_stretching_the_period_keeps_the_current_deadline() -> None:
    st = make()
    t0 = run_chunk(st, 10.0)
    current = st.deadline()
    st.rebase(2.0, t0)
    assert st.deadline() == pytest.approx(current)
    assert st.release() == pytest.approx(current - 2 * 1.5 * PERIOD)  # lookahead stretches too
    run_chunk(st, st.release())
    assert st.deadline() == pytest.approx(current + 2 * PERIOD)
    assert st.effective_fps == pytest.approx(6.0)


def test_rebasing_a_late_session_forgives_its_lag_once() -> None:
    st = make()
    t0 = run_chunk(st, 10.0)
    late = t0 + 5.0  # far past the current chunk's deadline
    st.rebase(1.0, late)
    assert st.deadline() == pytest.approx(late + PERIOD)
    run_chunk(st, late)
    assert st.misses == 0 and st.deadline() == pytest.approx(late + 2 * PERIOD)


def test_factor_before_the_first_chunk_only_sets_the_factor() -> None:
    st = make()
    st.rebase(1.5, 10.0)
    assert st.period == pytest.approx(1.5 * PERIOD) and st.deadline() == 10.0


def test_pause_and_resume_restart_the_clock() -> None:
    st = make()
    run_chunk(st, 10.0)
    st.resume(20.0)  # not paused: nothing happens
    assert not st.starting
    st.pause()
    assert not st.is_ready(100.0)
    st.resume(30.0)
    assert st.starting and st.deadline() == 30.0 and st.is_ready(30.0)


def test_steps_are_fixed_when_a_chunk_starts() -> None:
    st = make(steps=4)
    st.mark_planned(10.0)
    st.target_steps = 2  # the overload policy lowers steps meanwhile
    assert st.steps_for_chunk() == 4
    st.advance(st.next_item(), 0.01, 10.01)
    assert st.next_item().steps == 4 and st.remaining_denoise() == 3
    run_chunk(st, 10.01)
    assert st.steps_for_chunk() == 2


def test_a_stale_item_is_rejected() -> None:
    st = make()
    item = st.mark_planned(10.0)
    st.advance(item, 0.01, 10.01)
    st.mark_planned(10.01)
    with pytest.raises(ValueError, match="does not match"):
        st.advance(item, 0.01, 10.02)
