"""The few-step schedule with its flow shift, the spec's units, and streamer.json overrides."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

from streamer.models.wan.config import CausalConfig, WanLoadError, shifted_schedule  # noqa: E402
from tests.wan.helpers import tiny  # noqa: E402

pytestmark = pytest.mark.wan


def test_self_forcing_schedule():
    """[1000, 750, 500, 250] warped with shift 5: Self-Forcing's scheduler.timesteps[1000 - k] / 1000."""
    assert CausalConfig().timesteps == pytest.approx((1.0, 0.9375, 5 / 6, 0.625))
    assert shifted_schedule((1000, 500), 1.0) == (1.0, 0.5)  # no shift: the plain step list


def test_spec_units_and_thinned_schedule():
    model = tiny()
    spec = model.spec
    assert spec.latent_shape == (3, 4, 4, 6)  # latent frames per chunk, channels, 32/8 x 48/8
    assert spec.frames_per_chunk == 12  # video frames: 4 per latent frame
    assert (spec.sink_frames, spec.window_frames) == (12, 24)
    assert (model.layout.sink_frames, model.layout.window_frames, model.layout.frames_per_chunk) == (3, 6, 3)
    assert spec.schedule(4) == spec.timesteps
    assert spec.schedule(2) == pytest.approx((1.0, 5 * 0.5 / 3))  # thinned, still shifted
    assert spec.conditioning == ("text",) and spec.num_actions == 1 and spec.control_dim == 0


def test_streamer_json(tmp_path):
    path = tmp_path / "streamer.json"
    path.write_text(json.dumps({"window_frames": 9, "denoising_steps": [1000, 500], "shift": 3.0}))
    cfg = CausalConfig.load(path)
    assert cfg.window_frames == 9 and cfg.timesteps == pytest.approx((1.0, 0.75))
    assert CausalConfig.load(path).to_json()["denoising_steps"] == [1000, 500]
    path.write_text(json.dumps({"window_frames": 10}))
    with pytest.raises(WanLoadError, match=r"streamer\.json: .*multiples of frames_per_chunk"):
        CausalConfig.load(path)
