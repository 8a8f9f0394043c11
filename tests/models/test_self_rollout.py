"""Self-rollout distillation: the student's own rollout as its training past (self_rollout.py)."""

import json

import numpy as np
import pytest
import torch

from streamer.engine_factory import tiny_embedded
from streamer.models.embedded import distill
from streamer.models.embedded.model import prompt_tokens
from streamer.models.embedded.rollout import Script, rollout
from streamer.models.embedded.self_rollout import SelfRollout, source_chunks
from streamer.models.embedded.train import main
from tests.models.test_recycle import batch, shaken
from tests.models.test_training import tiny_run

PROMPTS = ["a red ball moving left on grass", "a blue square moving up at night", "a green triangle on sand",
           "a yellow ball bouncing on sea"]


def clips_and_scripts(model, n_chunks: int, depth: int):
    """Two training clips of `n_chunks` chunks (sink, window, current) and the scripts of a
    session that makes the same rollout, `depth + 1` chunks long (source_chunks' conditioning)."""
    f = model.cfg.frames_per_chunk
    rng = np.random.default_rng(4)
    prompts = [[PROMPTS[(i + c) % len(PROMPTS)] for c in range(n_chunks)] for i in range(2)]
    actions = rng.integers(0, 5, (2, n_chunks * f))
    controls = rng.random((2, n_chunks * f, 2)).astype(np.float32)
    clips = {
        "x0": torch.zeros(2, n_chunks * f, *model.spec.latent_shape[1:]),
        "tokens": torch.stack([torch.stack([prompt_tokens(p, model.cfg.dit.max_tokens)[0]
                                            for p in ps for _ in range(f)]) for ps in prompts]),
        "actions": torch.from_numpy(actions), "controls": torch.from_numpy(controls),
    }
    sink, window = model.cfg.sink_frames // f, model.cfg.window_frames // f
    order = [*source_chunks(depth, sink, window), n_chunks - 1]  # the rollout's chunks, then the current
    scripts = [Script([prompts[i][c] for c in order],
                      np.concatenate([actions[i, c * f:(c + 1) * f] for c in order]),
                      np.concatenate([controls[i, c * f:(c + 1) * f] for c in order])) for i in range(2)]
    return clips, scripts


def same_frames(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal but for rounding: the session encodes its prompts one by one, the rollout a batch at
    once, and a matmul's rounding depends on its batch (seen: 1 level in 0.01% of pixels)."""
    d = np.abs(a.astype(int) - b.astype(int))
    return bool(d.max() <= 1 and d.mean() < 1e-3)


@pytest.mark.parametrize("extra", [0, 3])  # a rollout just long enough, and one whose cache has rolled
def test_the_rolled_past_is_what_a_session_with_that_script_sees(extra):
    model = shaken(tiny_embedded())
    f = model.cfg.frames_per_chunk
    sink, window = model.cfg.sink_frames // f, model.cfg.window_frames // f
    n_chunks, depth = sink + window + 1, sink + window + extra
    clips, scripts = clips_and_scripts(model, n_chunks, depth)
    roller = SelfRollout(model, 1.0)
    past, states = roller.rollout(clips, depth, torch.Generator().manual_seed(9))
    frames = rollout(model, scripts, seed=9).frames  # (2, (depth + 1) * F, H, W, 3): the engine's path
    kept = [*range(sink), *range(depth - window, depth)]  # the chunks the cache holds at the end
    want = np.stack([frames[:, c * f:(c + 1) * f] for c in kept], 1).reshape(2, -1, *frames.shape[2:])
    assert same_frames(model.decode(past).numpy(), want)
    assert states.shape[1] == len(model.spec.timesteps) + 1
    assert same_frames(model.decode(states[:, -1]).numpy(), frames[:, depth * f:])  # then its current chunk
    assert not torch.equal(states[:, 0], states[:, 1])


def test_source_chunks_keep_the_clips_own_past_where_the_cache_ends_up_holding_it():
    assert source_chunks(3, 1, 2) == [0, 1, 2]
    assert source_chunks(6, 1, 2) == [0, 1, 1, 1, 1, 2]
    with pytest.raises(ValueError, match="cannot fill"):
        source_chunks(2, 1, 2)


def test_only_the_drawn_clips_past_changes():
    model, data = batch(4)
    shaken(model)
    f = model.cfg.frames_per_chunk
    torch.manual_seed(1)
    rolled = SelfRollout(model, 0.5)(data)
    assert rolled is not None and 0 < len(rolled.rows) < 4  # this seed draws some clips, not all
    others = [i for i in range(4) if i not in rolled.rows.tolist()]
    assert torch.equal(rolled.x0[others], data["x0"][others])
    assert torch.equal(rolled.x0[:, -f:], data["x0"][:, -f:])  # the current chunk stays the clip's
    assert not torch.allclose(rolled.x0[rolled.rows, :-f], data["x0"][rolled.rows, :-f], atol=1e-3)
    assert SelfRollout(model, 0.0)(data) is None


def test_the_teacher_steps_from_the_students_own_states(monkeypatch):
    model, data = batch(3)
    shaken(model)
    teacher = shaken(tiny_embedded(seed=1)).dit
    f = model.cfg.frames_per_chunk
    grids = distill.halving_grids(model.spec.timesteps, model.spec.schedule(2 * model.spec.default_steps))
    roller = SelfRollout(model, 0.999)
    seen = []
    monkeypatch.setattr(distill, "guided_velocity",
                        lambda t, x_t, *rest, real=distill.guided_velocity: seen.append(x_t) or real(t, x_t, *rest))
    rolled = []  # what the loss's rollout drew, for the checks below
    real_call = SelfRollout.__call__
    monkeypatch.setattr(SelfRollout, "__call__", lambda self, d: rolled.append(real_call(self, d)) or rolled[-1])
    torch.manual_seed(2)
    loss = distill.step_distill_loss(model.dit, teacher, data, model.cfg, 1.0, grids, rollout=roller)
    loss.backward()
    assert all(p.grad is not None for p in model.dit.blocks_list()[0].parameters())
    got = rolled[0]
    assert len(got.rows) == 3
    first = seen[0]  # the teacher's first pass: the student's states on the current chunk, its own past before
    for j, row in enumerate(got.rows.tolist()):
        assert any(torch.equal(first[row, -f:], got.states[j, i]) for i in range(got.states.shape[1] - 1))
        # and before it the rolled past (at its small commit time), not the clip's own
        own, real = ((first[row, :-f] - x[row, :-f]).abs().mean() for x in (got.x0, data["x0"]))
        assert own < real / 2
    torch.manual_seed(2)
    monkeypatch.setattr(SelfRollout, "__call__", real_call)
    assert distill.step_distill_loss(model.dit, teacher, data, model.cfg, 1.0, grids).item() != loss.item()


def test_the_flag_needs_step_distillation_and_is_recorded(tmp_path):
    with pytest.raises(SystemExit):
        tiny_run(tmp_path, "run", 1, "--self-rollout", "0.5")
    tiny_run(tmp_path, "teacher", 2)
    main(["--distill-steps", str(tmp_path / "export"), "--run-dir", str(tmp_path / "sd"), "--export",
          str(tmp_path / "student"), "--batch", "2", "--threads", "1", "--ckpt-minutes", "0", "--dit-steps", "2",
          "--student-steps", "2", "--self-rollout", "0.5"])
    record = json.loads((tmp_path / "student" / "dit_step.json").read_text())
    assert record["stage"] == "step-distill" and record["self_rollout"] == 0.5
