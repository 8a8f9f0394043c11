"""The tiny random Wan through the real Engine: batching changes nothing, LongLive's recache redirect
recomputes the window under the new prompt, and `serve --model wan-causal --config tiny-random`
streams over WebSocket."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("diffusers", reason="the wan extra is not installed: pip install 'streamer[wan]'")
pytest.importorskip("transformers", reason="the wan extra is not installed: pip install 'streamer[wan]'")

from streamer import cli  # noqa: E402
from streamer.client import connect  # noqa: E402
from streamer.engine import Engine, EngineConfig  # noqa: E402
from streamer.engine_factory import build_engine  # noqa: E402
from streamer.protocol import PromptMessage, StartMessage  # noqa: E402
from tests.engine_helpers import Collector, run_sessions  # noqa: E402
from tests.test_engine import frames_of  # noqa: E402
from tests.transport.conftest import start_server  # noqa: E402, F401 - fixture
from tests.wan.helpers import tiny  # noqa: E402

pytestmark = pytest.mark.wan


def make_engine(**kw) -> Engine:
    cfg = dict(max_sessions=2, fps=8.0, degrade=False, calibrate=True, sampler="renoise")
    cfg.update(kw)
    return Engine(tiny(), EngineConfig(**cfg))


async def test_batched_sessions_equal_sessions_alone():
    starts = [StartMessage(prompt="a red fox running through snow", seed=1),
              StartMessage(prompt="a city street at night", seed=2)]
    together = await run_sessions(make_engine(), starts, 3, limit_s=120)
    assert all(c.frames.shape == (12, 32, 48, 3) for s in together for c in s.chunks)
    for i, start in enumerate(starts):
        alone = await run_sessions(make_engine(), [start], 3, limit_s=120)
        diff = np.abs(frames_of(together[i], 3) - frames_of(alone[0], 3))
        assert diff.max() <= 2, f"session {i} differs by {diff.max()} levels when batched"
    assert np.abs(frames_of(together[0], 3) - frames_of(together[1], 3)).max() > 10


async def redirected(transition: str) -> tuple[Collector, int, list, list]:
    """One session redirected after 4 chunks; returns its sink, the first redirected chunk, and the
    model's commit calls (batch size, prompt, slot frames before) and decoded latents, in order."""
    engine = make_engine(max_sessions=1)
    commits: list[tuple[int, str, int]] = []
    latents: list = []
    streams: list = []
    real_commit, real_decode = engine.model.commit, engine.model.decode

    def commit(x0, cond, cache, noise=None):
        commits.append((len(cache.slots), cond.prompts[0].text, engine.pool.frames[cache.slots[0]]))
        return real_commit(x0, cond, cache, noise)

    def decode(x0):
        if engine.ready():  # not calibration's decodes
            latents.append(x0.clone())
            streams.append(engine.model.streams_of(x0))
        return real_decode(x0)

    engine.model.commit, engine.model.decode = commit, decode  # type: ignore[method-assign]
    await engine.start()
    try:
        sink = Collector()
        h = await engine.open_session(StartMessage(prompt="a red fox running through snow", seed=3), sink)
        await sink.wait_chunks(4, 120)
        ack = await engine.control(h.id, PromptMessage(prompt="a sailing boat in a storm", transition=transition))
        first = ack["applies_from_chunk"]
        await sink.wait_chunks(first + 2, 120)
    finally:
        await engine.stop()
    # The sampler's last step hands back the model's estimate bit for bit, so every decode found
    # the session's VAE cache (slot 0) instead of restarting the stream.
    assert streams and all(s == [0] for s in streams)
    return sink, first, commits, latents


async def test_recache_recomputes_the_window_under_the_new_prompt():
    recached, first, commits, lat_recache = await redirected("recache")
    # Under the new prompt, before chunk `first` is made: the kept chunks are re-committed into the
    # emptied slot, oldest first (tiny: 1 sink chunk + 2 window chunks), then chunk `first` itself.
    new = [c for c in commits if c[1] == "a sailing boat in a storm"]
    kept = min(first, 3)
    assert [frames for _, _, frames in new[: kept + 1]] == [0, 3, 6, 9][:kept] + [3 * kept]
    cut, first_cut, _, lat_cut = await redirected("cut")
    assert first_cut == first
    for k in range(first + 2):  # the same stream until the switch; the recomputed window changes the rest
        same = torch.equal(lat_recache[k], lat_cut[k])
        assert same == (k < first), f"chunk {k}: recache and cut {'agree' if same else 'differ'}"
    assert {c.prompt_version for c in recached.chunks if c.chunk_index >= first} == {1}


async def test_serve_tiny_random_streams_over_websocket(start_server):  # noqa: F811
    args = cli.build_parser().parse_args(
        ["serve", "--model", "wan-causal", "--config", "tiny-random", "--max-sessions", "2"])
    engine = build_engine(args)
    assert engine.cfg.sampler == "renoise" and engine.spec.name == "wan-causal"
    srv = await start_server(engine)
    client = await connect(srv.url, "ws", prompt="a red fox running through snow", seed=5)
    try:
        frames = [await client.next_frame() for _ in range(24)]
    finally:
        await client.close()
    assert all(fr.image.shape == (32, 48, 3) for fr in frames)
    assert [fr.chunk_index for fr in frames] == [0] * 12 + [1] * 12


@pytest.mark.parametrize(("flags", "technique"), [(["--step-reuse", "0.4"], "step reuse"),
                                                  (["--commit-reuse"], "commit reuse")])  # fmt: skip
def test_serve_with_a_caching_technique_wan_lacks_exits_2_at_startup(capsys, flags, technique):
    assert cli.main(["serve", "--model", "wan-causal", "--config", "tiny-random", *flags]) == 2
    err = capsys.readouterr().err
    assert "streamer serve: error:" in err and f"wan-causal does not support {technique}" in err
    Engine(tiny(), EngineConfig(calibrate=False))  # with every technique off it builds
