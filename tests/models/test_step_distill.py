"""Step distillation: one student step targets where two of the teacher's inference steps land."""

import json

import pytest
import torch

from streamer.models.embedded.distill import halving_grids, step_distill_loss, two_step_velocity
from streamer.models.embedded.model import EmbeddedModel
from streamer.models.embedded.train import main
from streamer.sampling import next_latent
from tests.models.test_causal_equivalence import TOL, tiny_model
from tests.models.test_distill import (
    batch,
    clean_past_problem,
    commit_past,
    guided_teacher,
    loss_before_and_after_training,
)


def test_target_is_two_guided_euler_steps_of_inference_over_the_cache():
    model = tiny_model()
    model.configure_guidance(2.5, 0.0)
    f = model.cfg.frames_per_chunk
    x, per_chunk, data = clean_past_problem(model)
    t_now, t_mid, t_next = 0.9, 0.833, 0.75
    t_frame = torch.zeros(1, x.shape[1])
    t_frame[:, -f:] = t_now
    v = two_step_velocity(model.dit, x, t_frame, data, model.cfg, 2.5, torch.tensor([t_mid]), torch.tensor([t_next]))

    cache, cond = commit_past(model, x, per_chunk, data)
    chunk = x[:, -f:]
    for t, t_after in [(t_now, t_mid), (t_mid, t_next)]:
        chunk = next_latent(chunk, model.denoise(chunk, torch.tensor([t]), cond, cache),
                            torch.tensor([t]), torch.tensor([t_after]))
    torch.testing.assert_close(x[:, -f:] + (t_next - t_now) * v, chunk, atol=TOL, rtol=TOL)


def test_the_shifted_schedule_of_twice_the_steps_halves_the_default_one():
    spec = EmbeddedModel.load().spec
    t_now, t_mid, t_next = halving_grids(spec.schedule(4), spec.schedule(8))
    assert t_now.tolist() == pytest.approx([1.0, 0.9, 0.75, 0.5])
    assert t_next.tolist() == pytest.approx([0.9, 0.75, 0.5, 0.0])
    assert ((t_now > t_mid) & (t_mid > t_next)).all()
    with pytest.raises(ValueError, match="time between"):
        halving_grids(spec.schedule(4), tuple(1 - i / 8 for i in range(8)))  # even steps miss the shifted ones


def test_student_moves_towards_the_two_step_teacher():
    model = tiny_model()
    teacher = tiny_model().dit.requires_grad_(False)
    with torch.no_grad():  # another teacher than the student's start, so there is something to learn
        for p in teacher.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    grids = halving_grids(model.spec.schedule(4), model.spec.schedule(8))
    data = batch(model)
    before, after = loss_before_and_after_training(
        model, lambda student: step_distill_loss(student, teacher, data, model.cfg, 1.0, grids))
    assert after < 0.7 * before, (before, after)


def test_distill_steps_command_starts_from_init_and_keeps_it_unguided(tmp_path):
    teacher = guided_teacher(tmp_path)
    init = tiny_model()
    with torch.no_grad():  # an init from an older autoencoder: the student must take the teacher's
        for p in init.ae.parameters():
            p.add_(0.1)
    init.save(tmp_path / "init")
    main(["--distill-steps", str(teacher), "--init", str(tmp_path / "init"), "--run-dir", str(tmp_path / "run"),
          "--export", str(tmp_path / "out"), "--dit-steps", "2", "--batch", "2", "--threads", "1",
          "--ckpt-minutes", "0"])
    student = EmbeddedModel.load(tmp_path / "out")
    assert student.cfg.guidance_scale == 1.0 and student.cfg.distilled_guidance_scale == 2.0
    record = json.loads((tmp_path / "out" / "dit_step.json").read_text())
    assert record == {"step": 2, "stage": "step-distill", "teacher_step": 7, "guidance_scale": 2.0,
                      "teacher_steps": 8}
    before = EmbeddedModel.load(tmp_path / "init").dit.state_dict()  # as saved (fp16)
    after = student.dit.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    want = EmbeddedModel.load(teacher).ae.state_dict()
    assert all(torch.equal(want[k], v) for k, v in student.ae.state_dict().items())


def test_distill_steps_refuses_an_init_of_another_shape(tmp_path):
    teacher = guided_teacher(tmp_path)
    other = tiny_model(window=6)
    other.save(tmp_path / "other")
    with pytest.raises(SystemExit, match="config field 'window_frames' differs from the teacher's"):
        main(["--distill-steps", str(teacher), "--init", str(tmp_path / "other"), "--run-dir", str(tmp_path / "run"),
              "--export", str(tmp_path / "out"), "--dit-steps", "1", "--threads", "1"])


def test_student_steps_halves_a_step_distilled_model_again(tmp_path):
    """`--student-steps 2` with a 4-step teacher: the student's schedule is every other time of
    the teacher's, and its config says so, so serving it runs 2 steps by default."""
    teacher = guided_teacher(tmp_path)
    main(["--distill-steps", str(teacher), "--student-steps", "2", "--run-dir", str(tmp_path / "run"),
          "--export", str(tmp_path / "out"), "--dit-steps", "1", "--batch", "2", "--threads", "1",
          "--ckpt-minutes", "0"])
    student = EmbeddedModel.load(tmp_path / "out")
    assert student.spec.default_steps == 2
    assert student.spec.timesteps == pytest.approx(EmbeddedModel.load(teacher).spec.schedule(4)[::2])
    assert json.loads((tmp_path / "out" / "dit_step.json").read_text())["teacher_steps"] == 4
