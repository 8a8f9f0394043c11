"""Error recycling: training on pasts that carry the model's own errors (flow.recycled_past)."""

import json

import numpy as np
import pytest
import torch

from streamer.engine_factory import tiny_embedded
from streamer.models.embedded import distill, dit_training
from streamer.models.embedded.dit_training import ClipSampler, dit_loss
from streamer.models.embedded.flow import clip_text, recycled_past
from streamer.models.embedded.masks import block_causal_context
from tests.models.test_training import tiny_run


def batch(n: int = 3):
    model = tiny_embedded()
    torch.manual_seed(0)
    return model, ClipSampler(model, np.random.default_rng(0)).sample(n)


def shaken(model):
    """The tiny model with weights given values: a fresh adaLN-Zero DiT outputs zeros whatever its context."""
    with torch.no_grad():
        for p in model.dit.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def test_marked_frames_become_the_models_one_pass_estimate_and_the_rest_stay_real():
    model, data = batch()
    shaken(model)  # so the estimate's velocity is not zero
    cfg, x0 = model.cfg, data["x0"]
    b, t = x0.shape[:2]
    f = cfg.frames_per_chunk
    frames = torch.zeros(b, t, dtype=torch.bool)
    frames[1, : 2 * f] = True  # clip 1's first two chunks; clips 0 and 2 not at all
    torch.manual_seed(5)
    out = recycled_past(model.dit, x0, frames, data, cfg)
    assert torch.equal(out[~frames], x0[~frames])
    # The same draws by hand: clip 1 alone, every chunk noised to its own time, one pass.
    torch.manual_seed(5)
    t_r = (0.25 + 0.5 * torch.rand(1, t // f)).repeat_interleave(f, 1)
    x_r = (1 - t_r[..., None, None, None]) * x0[1:2] + t_r[..., None, None, None] * torch.randn_like(x0[1:2])
    with torch.no_grad():
        v = model.dit(x_r, t_r, clip_text(model.dit, data["tokens"][1:2]), data["actions"][1:2],
                      data["controls"][1:2], block_causal_context(1, t, f, cfg.dit.tokens_per_frame))
    want = (x_r - t_r[..., None, None, None] * v)[0, : 2 * f]
    torch.testing.assert_close(out[1, : 2 * f], want)
    assert not torch.allclose(out[1, : 2 * f], x0[1, : 2 * f], atol=1e-3)


def test_nothing_marked_changes_nothing():
    model, data = batch()
    frames = torch.zeros(data["x0"].shape[:2], dtype=torch.bool)
    out = recycled_past(model.dit, data["x0"], frames, data, model.cfg)
    assert out is data["x0"]


def real_past_instead(monkeypatch, module) -> None:
    """`module`'s recycled_past makes the same random draws and hands back the real past."""
    real = module.recycled_past
    monkeypatch.setattr(module, "recycled_past", lambda dit, x0, *rest: (real(dit, x0, *rest), x0)[1])


def test_the_loss_trains_the_chunks_on_the_recycled_past(monkeypatch):
    model, data = batch(4)
    shaken(model)

    def loss() -> torch.Tensor:
        torch.manual_seed(11)
        return dit_loss(model.dit, data, model.cfg, recycle=0.999)

    own = loss()
    own.backward()
    assert all(p.grad is not None for p in model.dit.blocks_list()[0].parameters())
    real_past_instead(monkeypatch, dit_training)
    assert loss().item() != own.item()


@pytest.mark.parametrize("kind", ["guidance", "steps"])
def test_distillation_gives_student_and_teacher_the_students_own_past(monkeypatch, kind):
    model, data = batch(3)
    teacher = shaken(model).dit
    student = shaken(tiny_embedded()).dit  # same config, other weights: its estimates are its own
    cfg = model.cfg
    grids = distill.halving_grids((1.0, 0.5), (1.0, 0.75, 0.5, 0.25))

    def loss() -> float:
        torch.manual_seed(3)
        if kind == "guidance":
            return distill.guidance_distill_loss(student, teacher, data, cfg, 2.0, recycle=0.999).item()
        return distill.step_distill_loss(student, teacher, data, cfg, 2.0, grids, recycle=0.999).item()

    calls = []
    real = distill.recycled_past
    monkeypatch.setattr(distill, "recycled_past", lambda dit, *rest: calls.append(dit) or real(dit, *rest))
    own = loss()
    assert calls == [student]
    real_past_instead(monkeypatch, distill)
    assert loss() != own


def test_the_flag_records_its_share_in_the_exported_step(tmp_path):
    tiny_run(tmp_path, "run", 2, "--recycle", "0.5")
    assert json.loads((tmp_path / "export" / "dit_step.json").read_text()) == {"step": 2, "recycle": 0.5}
