"""Distribution matching on the student's own rollouts (dmd.py, `train --dmd`)."""

import copy
import json
import math

import pytest
import torch
from safetensors.torch import load_file

from streamer.models.embedded.distill import guided_velocity
from streamer.models.embedded.dmd import DistributionMatching, score_times
from streamer.models.embedded.flow import clip_velocity, noised
from streamer.models.embedded.model import EmbeddedModel
from streamer.models.embedded.train import main
from tests.models.test_causal_equivalence import tiny_model
from tests.models.test_distill import guided_teacher
from tests.models.test_recycle import batch, shaken


def matching(every: int = 1, scale: float = 1.0, critic_shift: float = 0.0):
    """A shaken tiny student, its DistributionMatching against a teacher that is the student's
    start, and a batch of clips; the critic is the teacher moved by `critic_shift` noise."""
    model, data = batch(2)
    shaken(model)
    teacher = copy.deepcopy(model.dit).requires_grad_(False)
    critic = copy.deepcopy(teacher)
    with torch.no_grad():
        for p in critic.parameters():
            p.add_(critic_shift * torch.randn_like(p))
    return model, DistributionMatching(model, teacher, scale, critic, 1e-3, every), data


def generated(model, data):
    """Clips whose last chunk is a leaf the loss's gradient lands on."""
    f = model.cfg.frames_per_chunk
    x0_gen = torch.randn_like(data["x0"][:, -f:]).requires_grad_(True)
    return data["x0"], x0_gen


def test_a_critic_that_scores_as_the_teacher_moves_nothing():
    model, dm, data = matching()
    clips, x0_gen = generated(model, data)
    loss = dm.student_loss(clips, x0_gen, data)
    loss.backward()
    # Zero but for rounding (the two passes batch their prompts differently); a critic 0.05 away
    # from the teacher gives gradients of order 1e-3.
    assert loss.item() < 1e-10
    assert x0_gen.grad.abs().max() < 1e-6


def test_a_guided_teacher_moves_the_chunk_even_against_its_own_weights():
    """The real score is guided, the critic's is not: the student is pushed towards the guided
    distribution though the critic starts as the teacher."""
    model, dm, data = matching(scale=2.0)
    clips, x0_gen = generated(model, data)
    dm.student_loss(clips, x0_gen, data).backward()
    assert x0_gen.grad.abs().mean() > 0


def test_the_gradient_is_the_normalised_difference_of_the_critics_and_the_teachers_estimates():
    model, dm, data = matching(scale=2.0, critic_shift=0.05)
    cfg, f = model.cfg, model.cfg.frames_per_chunk
    clips, x0_gen = generated(model, data)
    torch.manual_seed(3)
    dm.student_loss(clips, x0_gen, data).backward()

    torch.manual_seed(3)  # the same draws by hand: one time per clip, every frame noised to it
    x = torch.cat([clips[:, :-f], x0_gen.detach()], 1)
    b, t = x.shape[:2]
    t_clip = score_times(cfg, b)
    t_frame = t_clip[:, None].expand(b, t).contiguous()
    x_t, _ = noised(x, t_frame)
    bc = t_clip[:, None, None, None, None]
    with torch.no_grad():
        real = x_t[:, -f:] - bc * guided_velocity(dm.teacher, x_t, t_frame, data, cfg, 2.0)
        fake = x_t[:, -f:] - bc * clip_velocity(dm.critic, x_t, t_frame, data, cfg)[:, -f:]
    norm = (x0_gen.detach() - real).abs().mean(dim=(1, 2, 3, 4), keepdim=True)
    # d/dx 0.5 mean((x - sg(x - g))^2) = g / numel: descent moves x towards the teacher's estimate.
    torch.testing.assert_close(x0_gen.grad * x0_gen.numel(), (fake - real) / norm)
    assert not torch.allclose(fake, real, atol=1e-4)


def test_score_times_stay_inside_the_range_after_the_shift():
    model = tiny_model()
    t = score_times(model.cfg, 4000)
    assert 0.02 < t.min() and t.max() < 0.999
    assert (t > 0.5).float().mean() > 0.6  # the shift (3) leans to high noise, as the schedule does


def test_the_critic_steps_every_call_and_the_student_every_nth():
    model, dm, data = matching(every=3, critic_shift=0.05)
    student_before = copy.deepcopy(model.dit.state_dict())
    critic_states = [copy.deepcopy(dm.critic.state_dict())]
    losses = []
    for _ in range(6):
        losses.append(dm(model.dit, data))
        critic_states.append(copy.deepcopy(dm.critic.state_dict()))
    assert [loss is None for loss in losses] == [True, True, False, True, True, False]
    assert losses[2].requires_grad
    for a, b in zip(critic_states, critic_states[1:], strict=False):
        assert any(not torch.equal(a[k], b[k]) for k in a)
    # The student's weights are train_dit's to step: the loss only gives them a gradient.
    assert all(torch.equal(v, model.dit.state_dict()[k]) for k, v in student_before.items())
    losses[5].backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.dit.parameters())
    assert all(p.grad is None for p in dm.teacher.parameters())


def test_dmd_reads_no_real_latents():
    """train --dmd skips the autoencoder pass (ClipSampler(encode=False)), whose x0 is NaN: every
    latent the loss and the critic read must be the student's own."""
    model, dm, data = matching(critic_shift=0.05)
    loss = dm(model.dit, {**data, "x0": torch.full_like(data["x0"], float("nan"))})
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.dit.parameters() if p.grad is not None)
    assert all(torch.isfinite(p).all() for p in dm.critic.parameters())


def test_the_critic_learns_the_clips_it_is_shown():
    model, dm, data = matching()
    torch.manual_seed(0)
    clips = torch.randn_like(data["x0"]) * 0.5 + 0.3  # not clips the teacher knows

    def held_out() -> float:
        torch.manual_seed(99)
        t_frame = score_times(model.cfg, clips.shape[0])[:, None].expand(clips.shape[:2]).contiguous()
        x_t, noise = noised(clips, t_frame)
        with torch.no_grad():
            return float(((clip_velocity(dm.critic, x_t, t_frame, data, model.cfg) - (noise - clips)) ** 2).mean())

    before = held_out()
    for _ in range(30):
        dm.critic_step(clips, data)
    assert held_out() < 0.8 * before


def dmd_run(tmp_path, teacher, run: str, steps: int, *flags: str) -> None:
    main(["--dmd", str(teacher), "--init", str(tmp_path / "init"), "--run-dir", str(tmp_path / run),
          "--export", str(tmp_path / f"out-{run}"), "--dit-steps", str(steps), "--batch", "2", "--threads", "1",
          "--ckpt-minutes", "0", "--critic-every", "2", *flags])


def test_dmd_command_trains_an_unguided_student_and_resumes_exactly(tmp_path):
    teacher = guided_teacher(tmp_path)
    init = shaken(tiny_model())
    init.save(tmp_path / "init")
    dmd_run(tmp_path, teacher, "straight", 4)
    student = EmbeddedModel.load(tmp_path / "out-straight")
    assert student.cfg.guidance_scale == 1.0 and student.cfg.distilled_guidance_scale == 2.0
    record = json.loads((tmp_path / "out-straight" / "dit_step.json").read_text())
    assert record == {"step": 4, "stage": "dmd", "teacher_step": 7, "guidance_scale": 2.0, "critic_every": 2}
    log = [json.loads(line) for line in (tmp_path / "straight" / "dit_log.jsonl").read_text().splitlines()]
    assert [e["loss"] is None for e in log] == [True, False, False, False]  # the student's first step is the 2nd
    assert all(e["critic_loss"] > 0 for e in log)
    assert all(math.isfinite(e["loss"]) for e in log[1:])  # its clips were never encoded (x0 is NaN)
    before = EmbeddedModel.load(tmp_path / "init").dit.state_dict()
    assert any(not torch.equal(before[k], v) for k, v in student.dit.state_dict().items())

    dmd_run(tmp_path, teacher, "resumed", 3)  # stops between a critic step and a student step
    dmd_run(tmp_path, teacher, "resumed", 4)
    a = load_file(tmp_path / "out-straight" / "embedded.safetensors")
    b = load_file(tmp_path / "out-resumed" / "embedded.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)

    dmd_run(tmp_path, teacher, "resumed", 5, "--critic-lr", "3e-5")  # a resumed run takes its own critic rate
    opt = torch.load(tmp_path / "resumed" / "dit.pt", weights_only=False)["companion"]["critic_opt"]
    assert opt["param_groups"][0]["lr"] == 3e-5


def test_dmd_needs_a_student_and_a_critic_of_the_teachers_kind(tmp_path):
    teacher = guided_teacher(tmp_path)
    with pytest.raises(SystemExit):
        main(["--dmd", str(teacher), "--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "out")])
    tiny_model().save(tmp_path / "init")
    tiny_model(window=6).save(tmp_path / "other")
    with pytest.raises(SystemExit, match="config field 'window_frames' differs from the teacher's"):
        dmd_run(tmp_path, teacher, "run", 1, "--critic", str(tmp_path / "other"))
