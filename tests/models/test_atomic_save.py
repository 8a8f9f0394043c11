import shutil
from pathlib import Path

import pytest
import torch

from streamer.engine_factory import tiny_embedded
from streamer.models.embedded import model as model_module
from streamer.models.embedded.atomic_save import copy_atomically, save_atomically, write_atomically
from streamer.models.embedded.model import EmbeddedModel


def dies_midway(tmp):
    tmp.write_bytes(b"trunc")  # what a killed write leaves behind
    raise KeyboardInterrupt


def test_a_write_that_fails_midway_leaves_the_previous_file_whole(tmp_path):
    path = tmp_path / "dit.pt"
    save_atomically({"step": 1}, path)
    with pytest.raises(KeyboardInterrupt):
        write_atomically(path, dies_midway)
    assert torch.load(path, weights_only=False) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["dit.pt"]  # no temporary left over


def test_a_whole_save_replaces_the_checkpoint(tmp_path):
    path = tmp_path / "ae.pt"
    save_atomically({"step": 1}, path)
    save_atomically({"step": 2}, path)
    assert torch.load(path, weights_only=False) == {"step": 2}


def test_exported_weights_killed_midway_still_load_as_the_previous_export(tmp_path, monkeypatch):
    before = tiny_embedded(seed=0)
    before.save(tmp_path)
    monkeypatch.setattr(model_module, "save_file", lambda state, name: dies_midway(Path(name)))
    with pytest.raises(KeyboardInterrupt):
        tiny_embedded(seed=1).save(tmp_path)
    loaded = EmbeddedModel.load(tmp_path).state_dict()
    for k, v in before.state_dict().items():
        torch.testing.assert_close(loaded[k], v.half().to(v.dtype))
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]


def test_a_copy_into_the_shipped_folder_killed_midway_leaves_the_shipped_file(tmp_path, monkeypatch):
    # The recipe's last act copies the student over the package's shipped weights.
    shipped, student = tmp_path / "embedded.safetensors", tmp_path / "student.safetensors"
    shipped.write_bytes(b"shipped")
    student.write_bytes(b"student")
    monkeypatch.setattr(shutil, "copyfile", lambda source, dest: dies_midway(Path(dest)))
    with pytest.raises(KeyboardInterrupt):
        copy_atomically(student, shipped)
    assert shipped.read_bytes() == b"shipped"
    monkeypatch.undo()
    copy_atomically(student, shipped)
    assert shipped.read_bytes() == b"student"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["embedded.safetensors", "student.safetensors"]
