"""Messages and config: validation and derived values."""

from __future__ import annotations

import pytest

from scheduler import PlanItem, SchedulerConfig, SessionSpec, StepPlan
from scheduler.types import check_kind


def test_chunk_period_is_frames_over_fps() -> None:
    assert SessionSpec("a", fps=12.0, frames_per_chunk=2, steps=4).chunk_period == pytest.approx(2 / 12)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"session_id": ""}, "session_id"),
        ({"fps": 0.0}, "fps"),
        ({"frames_per_chunk": 0}, "frames_per_chunk"),
        ({"min_steps": 0}, "min_steps"),
        ({"min_steps": 5}, "min_steps"),
    ],
)
def test_session_spec_rejects_bad_values(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"session_id": "a", "fps": 12.0, "frames_per_chunk": 2, "steps": 4}
    fields.update(kwargs)
    with pytest.raises(ValueError, match=message):
        SessionSpec(**fields)  # type: ignore[arg-type]


def test_check_kind() -> None:
    assert check_kind("denoise") == "denoise"
    assert check_kind("commit") == "commit"
    with pytest.raises(ValueError, match="kind"):
        check_kind("decode")


def test_plan_helpers() -> None:
    items = (PlanItem("a", 0, "denoise", 0, 4), PlanItem("b", 3, "denoise", 2, 4))
    plan = StepPlan(items, "denoise", 0.02, 1.0)
    assert plan.batch_size == 2
    assert plan.session_ids == ("a", "b")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_batch": 0},
        {"max_sessions": 0},
        {"utilisation_bound": 0.0},
        {"playout_delay": -1.0},
        {"lookahead": -1.0},
        {"early_start": -1.0},
        {"stretch_step": 1.0},
        {"max_stretch_levels": -1},
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SchedulerConfig(**kwargs)  # type: ignore[arg-type]


def test_config_defaults_scale_with_each_sessions_period() -> None:
    s = SessionSpec("a", fps=10.0, frames_per_chunk=4, steps=4)  # period 0.4 s
    default = SchedulerConfig()
    assert default.playout_delay_for(s) == pytest.approx(0.4)
    assert default.lookahead_for(s) == pytest.approx(0.6)
    assert default.early_start_for(s) == pytest.approx(0.4)
    fixed = SchedulerConfig(playout_delay=0.1, lookahead=0.2, early_start=0.0)
    assert (fixed.playout_delay_for(s), fixed.lookahead_for(s), fixed.early_start_for(s)) == (0.1, 0.2, 0.0)
