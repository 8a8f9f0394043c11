import pytest
import torch

from streamer.models.embedded import atomic_save
from streamer.models.embedded.atomic_save import save_atomically


def test_a_save_that_fails_midway_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    path = tmp_path / "dit.pt"
    save_atomically({"step": 1}, path)

    def dies_midway(obj, f):
        with open(f, "wb") as fh:
            fh.write(b"trunc")  # what a killed write leaves behind
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic_save.torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        save_atomically({"step": 2}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=False) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["dit.pt"]  # no temporary left over


def test_a_whole_save_replaces_the_checkpoint(tmp_path):
    path = tmp_path / "ae.pt"
    save_atomically({"step": 1}, path)
    save_atomically({"step": 2}, path)
    assert torch.load(path, weights_only=False) == {"step": 2}
