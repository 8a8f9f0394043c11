"""Loading: the shipped weights load; bad paths and mismatches name the file and the field."""

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from streamer.engine_factory import MODELS, build_model, tiny_embedded
from streamer.models.embedded.config import ConfigError
from streamer.models.embedded.model import SHIPPED_WEIGHTS, WEIGHTS_DIR, EmbeddedModel
from streamer.models.embedded.recipe import WIDE


def saved_tiny(tmp_path: Path) -> Path:
    tiny_embedded().save(tmp_path)
    return tmp_path


def test_round_trip_of_saved_weights(tmp_path):
    model = tiny_embedded()
    model.save(tmp_path)
    loaded = EmbeddedModel.load(tmp_path)
    for key, value in model.state_dict().items():  # shipped in fp16, loaded back to fp32
        torch.testing.assert_close(loaded.state_dict()[key], value, atol=1e-3, rtol=1e-3)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(ConfigError, match="config file not found: .*embedded.json"):
        EmbeddedModel.load(tmp_path)
    saved_tiny(tmp_path)
    (tmp_path / "embedded.safetensors").unlink()
    with pytest.raises(ConfigError, match="weights file not found: .*embedded.safetensors"):
        EmbeddedModel.load(tmp_path)


def test_config_field_errors_name_the_field(tmp_path):
    saved_tiny(tmp_path)
    cfg = json.loads((tmp_path / "embedded.json").read_text())
    cfg["dit"]["depthh"] = 3
    (tmp_path / "embedded.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match="unknown field 'dit.depthh'"):
        EmbeddedModel.load(tmp_path)


def test_shape_mismatch_names_the_key(tmp_path):
    saved_tiny(tmp_path)
    cfg = json.loads((tmp_path / "embedded.json").read_text())
    cfg["dit"]["dim"] = 48  # weights were saved at 32
    (tmp_path / "embedded.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError, match=r"key 'dit\..*' has shape"):
        EmbeddedModel.load(tmp_path)


def test_corrupt_and_incomplete_weights(tmp_path):
    saved_tiny(tmp_path)
    (tmp_path / "embedded.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match="cannot read safetensors"):
        EmbeddedModel.load(tmp_path)
    state = tiny_embedded().state_dict()
    state.pop("dit.patch_in.weight")
    save_file(state, str(tmp_path / "embedded.safetensors"))
    with pytest.raises(ConfigError, match="missing key 'dit.patch_in.weight'"):
        EmbeddedModel.load(tmp_path)


def test_shipped_weights_load():
    model = EmbeddedModel.load()
    assert model.spec.height == model.spec.width == 128
    assert (WEIGHTS_DIR / "embedded.json").is_file()


def test_the_shipped_model_loads_by_name_as_the_recipe_makes_it(tmp_path):
    assert "embedded" in MODELS and set(SHIPPED_WEIGHTS) == {"embedded"}
    model = build_model("embedded", None, None)
    assert (model.cfg.dit.dim, model.cfg.dit.heads, model.cfg.dit.depth) == WIDE  # 6 blocks at width 192
    # A distilled student, committing its past slightly noisy, in 4 steps.
    assert (model.cfg.guidance_scale, model.cfg.distilled_guidance_scale, model.cfg.context_noise) == (1.0, 2.0, 0.2)
    assert model.spec.default_steps == 4
    # --weights still wins over the shipped folder.
    assert build_model("embedded", None, str(saved_tiny(tmp_path))).cfg.dit.depth == tiny_embedded().cfg.dit.depth
