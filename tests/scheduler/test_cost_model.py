"""CostModel: calibration, online learning, interpolation/extrapolation, monotonicity."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler import CostModel

from .helpers import affine_cost, calibrated


def test_empty_model_uses_a_prior_that_rewards_batching() -> None:
    model = CostModel(default_step_s=0.02, prior_fixed=0.5)
    assert model.predict("denoise", 1) == pytest.approx(0.02)
    assert model.predict("commit", 3) == pytest.approx(0.02 * (0.5 + 0.5 * 3))
    assert model.per_sample("denoise", 8) < model.per_sample("denoise", 1)
    assert model.max_useful_batch("denoise", 8) == 8


def test_calibrated_points_interpolation_and_extrapolation() -> None:
    model = calibrated(0.010, 0.004, sizes=(2, 4, 8))
    assert model.predict("denoise", 4) == pytest.approx(0.026)
    assert model.predict("denoise", 6) == pytest.approx(0.034)  # between 4 and 8
    assert model.predict("denoise", 16) == pytest.approx(0.074)  # the affine fit, above the table
    assert model.predict("denoise", 1) == pytest.approx(0.014)  # the affine fit, below the table
    assert model.measurements()[("commit", 8)] == pytest.approx(0.042)


def test_single_point_extrapolates_with_the_prior_shape() -> None:
    model = CostModel(prior_fixed=0.5)
    model.calibrate({("denoise", 2): 0.03})
    assert model.predict("denoise", 4) == pytest.approx(0.03 * 2.5 / 1.5)
    assert model.predict("denoise", 1) == pytest.approx(0.03 * 1.0 / 1.5)


def test_negative_intercept_is_refit_through_the_origin() -> None:
    model = CostModel()
    model.calibrate({("denoise", 2): 0.01, ("denoise", 4): 0.05})
    slope = (2 * 0.01 + 4 * 0.05) / (4 + 16)
    assert model.predict("denoise", 8) == pytest.approx(8 * slope)
    assert model.predict("denoise", 1) == pytest.approx(min(slope, 0.01))


def test_decreasing_measurements_are_made_monotone() -> None:
    model = CostModel()
    model.calibrate({("denoise", 1): 0.05, ("denoise", 2): 0.04, ("denoise", 4): 0.045})
    predictions = [model.predict("denoise", b) for b in range(1, 12)]
    assert predictions == sorted(predictions)
    assert predictions[1] == pytest.approx(0.05)  # b=2 is never cheaper than b=1


def test_observe_learns_by_moving_average_and_pulls_other_sizes() -> None:
    model = calibrated(0.010, 0.004)  # b=4 costs 0.026
    before = {b: model.predict("denoise", b) for b in (1, 4, 8, 16)}
    for _ in range(30):
        model.observe("denoise", 4, 0.052)  # reality is twice as slow
    assert model.predict("denoise", 4) == pytest.approx(0.052, rel=1e-3)
    assert all(model.predict("denoise", b) > before[b] for b in before)
    assert model.observations("denoise", 4) == 30
    assert model.observations("commit", 4) == 0
    # one step of the moving average at a size seen before
    model.observe("denoise", 4, 0.152)
    assert model.predict("denoise", 4) == pytest.approx(0.052 + model.alpha * 0.1, rel=1e-3)


def test_a_calibration_off_at_every_size_is_corrected_at_every_size() -> None:
    # A start-up run on a cold, busy process measured everything twice as slow as it is.
    model = calibrated(0.020, 0.008)
    truth = affine_cost()
    for _ in range(60):
        model.observe("denoise", 4, truth("denoise", 4))  # batches only ever run at size 4
    for b in (1, 2, 6, 8, 16):  # sizes admission asks about, though none has run
        assert model.predict("denoise", b) == pytest.approx(truth("denoise", b), rel=0.01)
    assert model.predict("commit", 8) == pytest.approx(2 * truth("commit", 8))  # its own level


def test_without_calibration_the_prior_shape_does_not_drag_a_measured_size() -> None:
    # The prior's shape (half fixed) is a guess; a linear device does not follow it.
    model = CostModel()
    model.observe("denoise", 4, 0.008)
    for _ in range(50):
        model.observe("denoise", 1, 0.002)
    assert model.predict("denoise", 1) == pytest.approx(0.002)
    assert model.predict("denoise", 4) == pytest.approx(0.008, rel=0.1)


def test_recalibrating_restarts_the_level() -> None:
    model = calibrated()
    for _ in range(20):
        model.observe("denoise", 2, 0.1)
    model.calibrate({("denoise", b): 0.010 + 0.004 * b for b in (1, 2, 4, 8)})
    model.observe("denoise", 2, 0.018)  # exactly as calibrated: nothing else moves
    assert model.predict("denoise", 8) == pytest.approx(0.042)


def test_first_observation_of_a_size_is_taken_as_is() -> None:
    model = CostModel(shared=0.0)
    model.observe("denoise", 3, 0.02)
    assert model.predict("denoise", 3) == pytest.approx(0.02)


def test_commit_borrows_the_denoise_table_until_measured() -> None:
    model = CostModel()
    model.calibrate({("denoise", 1): 0.02, ("denoise", 4): 0.03})
    assert model.predict("commit", 4) == pytest.approx(0.03)
    model.observe("commit", 4, 0.01)
    assert model.predict("commit", 4) == pytest.approx(0.01)
    assert model.predict("denoise", 4) == pytest.approx(0.03)


def test_max_useful_batch() -> None:
    assert calibrated(0.010, 0.004).max_useful_batch("denoise", 6) == 6  # fixed cost: batch all
    saturated = calibrated(0.0, 0.004)  # linear, no fixed cost: nothing gained by batching
    assert saturated.max_useful_batch("denoise", 8) == 1
    assert calibrated().max_useful_batch("denoise", 0) == 1


def test_predictions_stay_positive_when_pulled_down_hard() -> None:
    model = CostModel(alpha=1.0, shared=1.0)
    model.calibrate({("denoise", 1): 1.0, ("denoise", 2): 1.0})
    model.observe("denoise", 1, 1e-12)
    assert model.predict("denoise", 2) > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"default_step_s": 0.0}, "default_step_s"),
        ({"alpha": 0.0}, "alpha"),
        ({"shared": 2.0}, "shared"),
        ({"prior_fixed": 1.0}, "prior_fixed"),
    ],
)
def test_constructor_validation(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CostModel(**kwargs)


def test_argument_validation() -> None:
    model = CostModel()
    with pytest.raises(ValueError, match="batch_size"):
        model.predict("denoise", 0)
    with pytest.raises(ValueError, match="batch_size"):
        model.observe("denoise", 0, 0.1)
    with pytest.raises(ValueError, match="seconds"):
        model.observe("denoise", 1, 0.0)
    with pytest.raises(ValueError, match="kind"):
        model.calibrate({("decode", 1): 0.1})


@settings(max_examples=60, deadline=None, database=None)
@given(
    table=st.dictionaries(st.integers(1, 16), st.floats(1e-4, 1.0), min_size=0, max_size=6),
    observed=st.lists(st.tuples(st.integers(1, 24), st.floats(1e-4, 1.0)), max_size=10),
)
def test_predictions_are_monotone_in_batch_size(
    table: dict[int, float], observed: list[tuple[int, float]]
) -> None:
    model = CostModel()
    model.calibrate({("denoise", b): s for b, s in table.items()})
    for b, s in observed:
        model.observe("denoise", b, s)
    predictions = [model.predict("denoise", b) for b in range(1, 33)]
    assert all(p > 0 for p in predictions)
    assert all(a <= b for a, b in zip(predictions, predictions[1:], strict=False))
