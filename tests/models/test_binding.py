"""binding.py: which object each prompt word describes, and the loss that teaches the prompt
encoder to name a word's whole object there."""

import json

import numpy as np
import pytest
import torch

from streamer.engine_factory import tiny_embedded
from streamer.models.embedded import vocab
from streamer.models.embedded.binding import GROUPS, binding_loss, binding_targets
from streamer.models.embedded.dit_training import ClipSampler, dit_loss
from streamer.models.embedded.model import prompt_tokens
from streamer.models.embedded.train import main
from tests.models.test_training import tiny_run


def test_each_content_word_names_its_own_object_and_nothing_else_names_one():
    parsed = vocab.parse_prompt("a red square moving left and a violet circle bouncing on grass")
    words = vocab.tokenize("a red square moving left and a violet circle bouncing on grass")
    named = {w: o for w, o in zip(words, parsed.token_objects, strict=True)}
    assert [named[w] for w in ("red", "square", "left")] == [0, 0, 0]
    assert [named[w] for w in ("violet", "circle", "bouncing")] == [1, 1, 1]
    assert [named[w] for w in ("a", "moving", "and", "on", "grass")] == [-1] * 5
    # Unknown words are not tokens, so they have no entry; a third object is not in the spec.
    assert vocab.parse_prompt("a red zorp ball").token_objects == [-1, 0, 0]
    third = vocab.parse_prompt("a red ball a blue ball a green ball")
    assert len(third.spec.objects) == 2 and third.token_objects[-2:] == [-1, -1]
    for text in ("game: a red character on sand", "avatar: tan skin red hair on sky"):
        assert set(vocab.parse_prompt(text).token_objects) == {-1}, text


def test_targets_are_each_words_objects_attributes_at_its_token_position():
    tokens, _ = prompt_tokens("a blue triangle moving up and a white ball staying still on sea", 16)
    targets = binding_targets(tokens[None])[0]
    blue = (GROUPS[0].index("blue"), GROUPS[1].index("triangle"), GROUPS[2].index("up"))
    white = (GROUPS[0].index("white"), GROUPS[1].index("ball"), GROUPS[2].index("still"))
    words = vocab.tokenize("a blue triangle moving up and a white ball staying still on sea")
    for i, w in enumerate(words):  # token 0 is BOS
        want = blue if w in ("blue", "triangle", "up") else white if w in ("white", "ball", "still") else (-1,) * 3
        assert tuple(targets[i + 1].tolist()) == want, w
    assert (targets[0] == -1).all() and (targets[len(words) + 1 :] == -1).all()


def test_the_loss_falls_as_the_encoder_learns_binding_and_is_zero_without_objects():
    model = tiny_embedded()
    rng = np.random.default_rng(0)
    tokens = torch.stack([prompt_tokens(vocab.describe(vocab.random_spec(rng, "story", 1.0)), model.cfg.dit.max_tokens)[0]
                          for _ in range(16)])
    opt = torch.optim.Adam(model.dit.text.parameters(), lr=3e-3)
    before = binding_loss(model.dit.text, tokens).item()
    for _ in range(60):
        loss = binding_loss(model.dit.text, tokens)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert binding_loss(model.dit.text, tokens).item() < 0.3 * before
    game = prompt_tokens("game: a red character on sand", model.cfg.dit.max_tokens)[0][None]
    assert binding_loss(model.dit.text, game).item() == 0.0


def test_dit_loss_adds_the_weighted_binding_loss_and_leaves_the_flow_loss_as_it_was():
    model = tiny_embedded()
    data = ClipSampler(model, np.random.default_rng(0)).sample(3)
    torch.manual_seed(1)
    plain = dit_loss(model.dit, data, model.cfg)
    torch.manual_seed(1)
    bound = dit_loss(model.dit, data, model.cfg, bind=0.5)
    extra = binding_loss(model.dit.text, data["tokens"])
    assert extra > 0 and torch.allclose(bound, plain + 0.5 * extra)


def test_the_sampler_draws_two_object_prompts_for_the_loss_after_the_same_clips():
    model = tiny_embedded()
    plain = ClipSampler(model, np.random.default_rng(0)).sample(2)
    extra = ClipSampler(model, np.random.default_rng(0), bind_prompts=5).sample(2)
    assert torch.equal(extra["tokens"], plain["tokens"]) and "bind_tokens" not in plain
    assert extra["bind_tokens"].shape == (5, model.cfg.dit.max_tokens)
    objects = binding_targets(extra["bind_tokens"])[..., 0]  # colour index per word, -1 off-object
    assert all(len(set(row[row >= 0].tolist())) == 2 for row in objects)  # two objects, two colours
    torch.manual_seed(1)
    with_extra = dit_loss(model.dit, extra, model.cfg, bind=1.0)
    torch.manual_seed(1)
    flow = dit_loss(model.dit, extra, model.cfg)
    both = torch.cat([extra["tokens"].reshape(-1, extra["tokens"].shape[-1]), extra["bind_tokens"]])
    assert torch.allclose(with_extra, flow + binding_loss(model.dit.text, both))


def test_the_weight_reaches_the_exported_record_and_distillation_refuses_it(tmp_path):
    tiny_run(tmp_path, "run", 2, "--bind", "0.1")
    assert json.loads((tmp_path / "export" / "dit_step.json").read_text()) == {"step": 2, "bind": 0.1}
    with pytest.raises(SystemExit):
        main(["--export", str(tmp_path / "export"), "--distill-steps", str(tmp_path / "export"), "--bind", "0.1"])
    with pytest.raises(SystemExit):
        main(["--export", str(tmp_path / "export"), "--bind", "-1"])
