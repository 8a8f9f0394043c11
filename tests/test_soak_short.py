"""A short soak in CI, and the soak's action-to-effect probe on ground truth.

The soak: 4 users (2 WebSocket, 2 WebRTC) for about a minute against a real
`streamer serve` on the tiny random model, through `benchmarks/soak.py` exactly as outside
tools run it. Behaviour only: no errors, no lost or refused sessions, every client got frames.
The latency figures are printed, never asserted (CI machines are shared and noisy).

The server runs at 8 fps with a loose admission bound: this test is about behaviour, and on a
loaded machine a calibrated admission could otherwise refuse one of the four users.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from benchmarks.soak import GameProbe
from streamer.client import Frame
from streamer.models.embedded.vocab import ACTIONS, SceneSpec
from streamer.models.embedded.world import World

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("miss_rate", "ttff_p50_s", "ttff_p99_s", "interval_p50_s", "interval_p99_s", "stalls_per_min",
           "glass_to_glass_p50_s", "glass_to_glass_p99_s", "action_to_effect_p50_s", "client_frames_dropped",
           "server_frames_dropped", "rss_slope_mb_per_min", "fds_after_minus_before")  # fmt: skip


def test_short_soak_both_transports(tmp_path):
    cmd = [sys.executable, "benchmarks/soak.py", "--sessions", "4", "--seconds", "40", "--transport", "mix",
           "--server-args", "--config tiny-random --fps 8 --utilisation-bound 4",
           "--out-dir", str(tmp_path), "--name", "ci", "--json", "--no-progress"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = proc.stdout.strip().splitlines()
    assert lines, f"no output (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    result = json.loads(lines[-1])
    print("\nshort soak:", {k: result.get(k) for k in FIGURES})
    assert result["errors"] == 0, result["error_samples"]
    assert result["refused"] == 0, result["refusal_reasons"]
    assert result["lost"] == 0
    assert result["sessions"] == 4 and result["sessions_started"] == 4
    clients = json.loads(Path(result["json"]).read_text())["clients"]
    assert sorted(c["transport"] for c in clients) == ["webrtc", "webrtc", "ws", "ws"]
    assert all(c["frames"] > 0 for c in clients), clients
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert Path(result["plot"]).is_file()


def test_action_to_effect_probe_reads_ground_truth_with_a_known_delay():
    """The soak's action-to-effect probe, with the world's own renderer standing in for a model
    that responds exactly `delay` frames after an action is sent: it must measure that delay.
    (A soak on tiny-random cannot exercise the probe: its pixels are unreadable.)"""
    fps, delay = 24.0, 3
    rng = np.random.default_rng(0)
    spec = SceneSpec("game", "grass", character_color="orange")
    world, probe = World(spec, rng, 128), GameProbe("orange", "grass")
    pending: list[tuple[int, str]] = []  # (frame the action takes effect, action)
    held = "none"
    for k in range(24 * 20):
        while pending and pending[0][0] <= k:
            held = pending.pop(0)[1]
        image = world.step(ACTIONS.index(held))
        probe.on_frame(Frame(image, k / fps, None, None, k, False))
        if k % 24 == 12:  # one action a second, sent just after frame k arrived
            action = probe.choose(rng)
            probe.sent(action, k / fps + 1e-6)
            pending.append((k + delay, action))
    probe.expire()
    measured = [v for _, v in probe.latencies]
    assert probe.readable
    assert len(measured) >= 15 and probe.unanswered <= 2, (len(measured), probe.unanswered)
    assert abs(np.median(measured) - delay / fps) < 0.5 / fps, measured
