"""Guidance distillation: its target is what guided inference computes, and the student learns it."""

import copy
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from streamer.models.base import Conditioning
from streamer.models.embedded.distill import (
    guidance_distill_loss,
    guided_velocity,
    past_times,
    teacher_problem,
)
from streamer.models.embedded.dit_training import ClipSampler
from streamer.models.embedded.model import EmbeddedModel, prompt_tokens
from streamer.models.embedded.train import main
from tests.models.test_causal_equivalence import TOL, tiny_model

PROMPTS = ["a red ball moving left on grass", "a blue square moving up on sea"]


def clean_past_problem(model, chunks: int = 3):
    """A clip whose last chunk is a redirect, as the distillation targets see it (tokens per frame)."""
    f = model.cfg.frames_per_chunk
    n = f * chunks
    x = torch.randn(1, n, *model.spec.latent_shape[1:])
    actions, controls = torch.randint(0, 5, (1, n)), torch.rand(1, n, 2)
    per_chunk = [PROMPTS[0]] * (chunks - 1) + [PROMPTS[1]]
    tokens = torch.stack([prompt_tokens(per_chunk[i // f], model.cfg.dit.max_tokens)[0] for i in range(n)])[None]
    return x, per_chunk, {"tokens": tokens, "actions": actions, "controls": controls}


def commit_past(model, x, per_chunk, data, noise=None):
    """Commit every chunk but the last to a cache slot, as a session does (with `noise` (1, T, C, h, w)
    for a model with context noise) -> (cache batch, last chunk's cond)."""
    f = model.cfg.frames_per_chunk
    pool = model.new_pool(1)
    slot = pool.allocate()
    for k, text in enumerate(per_chunk):
        sl = slice(k * f, (k + 1) * f)
        cond = Conditioning(model.encode_prompt([text]), data["actions"][:, sl], data["controls"][:, sl])
        if k < len(per_chunk) - 1:
            model.commit(x[:, sl], cond, pool.batch([slot], commit=True), None if noise is None else noise[:, sl])
    return pool.batch([slot]), cond


def test_target_equals_guided_inference_over_the_cache():
    """Clean past committed to the cache, then a guided denoise: the velocity the training targets."""
    model = tiny_model()
    model.configure_guidance(2.5, 0.0)
    f = model.cfg.frames_per_chunk
    x, per_chunk, data = clean_past_problem(model)
    t_now = 0.75
    t_frame = torch.zeros(1, x.shape[1])
    t_frame[:, -f:] = t_now
    target = guided_velocity(model.dit, x, t_frame, data, model.cfg, 2.5)

    cache, cond = commit_past(model, x, per_chunk, data)
    x0 = model.denoise(x[:, -f:], torch.tensor([t_now]), cond, cache)
    torch.testing.assert_close((x[:, -f:] - x0) / t_now, target, atol=TOL, rtol=TOL)


def test_with_context_noise_the_target_sees_the_past_as_the_cache_holds_it():
    """A model committing at t_c: its past noised to t_c in training is its cache at inference."""
    model = tiny_model()
    model = EmbeddedModel(dataclasses.replace(model.cfg, context_noise=0.2), model.ae, model.dit)
    model.configure_guidance(2.5, 0.0)
    f = model.cfg.frames_per_chunk
    x, per_chunk, data = clean_past_problem(model)
    noise = torch.randn_like(x)
    t_now = 0.75
    t_frame = torch.full((1, x.shape[1]), 0.2)
    t_frame[:, -f:] = t_now
    past_noised = torch.cat([torch.lerp(x[:, :-f], noise[:, :-f], 0.2), x[:, -f:]], 1)
    target = guided_velocity(model.dit, past_noised, t_frame, data, model.cfg, 2.5)

    cache, cond = commit_past(model, x, per_chunk, data, noise)
    x0 = model.denoise(x[:, -f:], torch.tensor([t_now]), cond, cache)
    torch.testing.assert_close((x[:, -f:] - x0) / t_now, target, atol=TOL, rtol=TOL)
    assert bool(((past_times(model.cfg, 4, 6) >= 0.2) & (past_times(model.cfg, 4, 6) < 0.25)).all())


def batch(model):
    torch.manual_seed(0)
    return ClipSampler(model, np.random.default_rng(0)).sample(3)


def test_loss_is_the_guidance_gap_when_the_student_is_the_teacher():
    model = tiny_model()
    data = batch(model)
    torch.manual_seed(1)
    with torch.no_grad():
        unguided = guidance_distill_loss(model.dit, model.dit, data, model.cfg, 1.0).item()
        torch.manual_seed(2)
        guided = guidance_distill_loss(model.dit, model.dit, data, model.cfg, 3.0).item()
    assert unguided < 1e-10  # scale 1: the target is the conditional velocity itself
    assert guided > 1e-4  # scale 3: the student is off by 2 (vc - vu)


def loss_before_and_after_training(model, loss) -> tuple[float, float]:
    """`loss(student)` on one fixed noise draw, before and after 30 training steps of the student
    (each on its own draw): only the student changes between the two figures."""

    def loss_at(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return loss(model.dit)

    opt = torch.optim.AdamW(model.dit.parameters(), lr=2e-3)
    with torch.no_grad():
        before = loss_at(123).item()
    for step in range(30):
        value = loss_at(step)
        opt.zero_grad()
        value.backward()
        opt.step()
    with torch.no_grad():
        after = loss_at(123).item()
    return before, after


def test_student_moves_towards_the_guided_teacher():
    model = tiny_model()
    teacher = copy.deepcopy(model.dit).requires_grad_(False)
    data = batch(model)
    before, after = loss_before_and_after_training(
        model, lambda student: guidance_distill_loss(student, teacher, data, model.cfg, 2.0))
    assert after < 0.7 * before, (before, after)


def guided_teacher(tmp_path):
    model = tiny_model()
    model.cfg = dataclasses.replace(model.cfg, guidance_scale=2.0)
    model.save(tmp_path / "teacher")
    (tmp_path / "teacher" / "dit_step.json").write_text(json.dumps({"step": 7}) + "\n")
    return tmp_path / "teacher"


def test_distill_command_exports_an_unguided_student(tmp_path):
    teacher = guided_teacher(tmp_path)
    main(["--distill-guidance", str(teacher), "--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "out"),
          "--dit-steps", "2", "--batch", "2", "--threads", "1", "--ckpt-minutes", "0"])
    student = EmbeddedModel.load(tmp_path / "out")
    assert student.cfg.guidance_scale == 1.0  # one pass a step
    assert student.cfg.distilled_guidance_scale == 2.0
    record = json.loads((tmp_path / "out" / "dit_step.json").read_text())
    assert record == {"step": 2, "stage": "guidance-distill", "teacher_step": 7, "guidance_scale": 2.0}
    before = EmbeddedModel.load(teacher).dit.state_dict()
    after = student.dit.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_distill_refuses_an_unguided_teacher_and_exporting_over_it(tmp_path):
    teacher = guided_teacher(tmp_path)
    common = ["--run-dir", str(tmp_path / "run"), "--dit-steps", "1", "--threads", "1"]
    with pytest.raises(SystemExit, match="must differ"):
        main(["--distill-guidance", str(teacher), "--export", str(teacher), *common])
    unguided = tiny_model()
    unguided.save(tmp_path / "plain")
    with pytest.raises(SystemExit, match="guidance_scale 1.0"):
        main(["--distill-guidance", str(tmp_path / "plain"), "--export", str(tmp_path / "out"), *common])


def test_flow_matching_training_refuses_to_warm_start_from_a_distilled_student(tmp_path):
    teacher = guided_teacher(tmp_path)
    main(["--distill-guidance", str(teacher), "--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "out"),
          "--dit-steps", "1", "--batch", "2", "--threads", "1", "--ckpt-minutes", "0"])
    with pytest.raises(SystemExit, match="stage 'guidance-distill', this run is 'flow-matching'"):
        main(["--run-dir", str(tmp_path / "run2"), "--export", str(tmp_path / "out"), "--dit-steps", "2",
              "--batch", "2", "--threads", "1"])


@pytest.mark.parametrize("name", ["teacher", "teacher12", "teacher12-recycled"])
def test_the_committed_teacher_is_a_guided_flow_matching_model(name: str) -> None:
    # Base training warm-starts from it and distillation needs it guided on every step.
    folder = Path(__file__).resolve().parents[2] / "checkpoints" / name
    teacher = EmbeddedModel.load(folder)
    assert teacher_problem(teacher.cfg) is None
    record = json.loads((folder / "dit_step.json").read_text())
    assert record.get("stage", "flow-matching") == "flow-matching"


def test_a_deeper_teacher_teaches_a_student_of_the_init_s_depth(tmp_path):
    from streamer.models.embedded.grow import grown_dit

    shallow = tiny_model()
    deep = grown_dit(shallow, shallow.cfg.dit.depth + 1)
    deep.cfg = dataclasses.replace(deep.cfg, guidance_scale=2.0)
    deep.save(tmp_path / "teacher")
    (tmp_path / "teacher" / "dit_step.json").write_text(json.dumps({"step": 7}) + "\n")
    shallow.save(tmp_path / "init")
    common = ["--distill-guidance", str(tmp_path / "teacher"), "--run-dir", str(tmp_path / "run"),
              "--dit-steps", "1", "--batch", "2", "--threads", "1", "--ckpt-minutes", "0"]
    main([*common, "--init", str(tmp_path / "init"), "--export", str(tmp_path / "out"), "--context-noise", "0.1"])
    student = EmbeddedModel.load(tmp_path / "out")
    assert student.cfg.dit.depth == shallow.cfg.dit.depth
    assert student.cfg.guidance_scale == 1.0 and student.cfg.distilled_guidance_scale == 2.0
    assert student.cfg.context_noise == 0.1  # the student's own inference choice, as its past was trained
    wider = tiny_model()
    wider.cfg = dataclasses.replace(wider.cfg, dit=dataclasses.replace(wider.cfg.dit, mlp_ratio=2.0))
    wider.dit = type(wider.dit)(wider.cfg.dit)
    wider.save(tmp_path / "wider")
    with pytest.raises(SystemExit, match="config field 'dit.mlp_ratio' differs from the teacher's"):
        main([*common, "--run-dir", str(tmp_path / "run2"), "--init", str(tmp_path / "wider"),
              "--export", str(tmp_path / "out2")])
