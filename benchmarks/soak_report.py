"""The soak's report (soak.py): its summary (the JSON line that is the contract for outside
tools), per-client details and latency windows for the JSON file, and the plot."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import pct, slope_per_minute

if TYPE_CHECKING:
    from benchmarks.soak import Recorder, SoakConfig

MAX_ERROR_SAMPLES = 50


def _delta(before: dict | None, after: dict | None, key: str) -> float | None:
    if not before or not after or after.get(key) is None or before.get(key) is None:
        return None
    return after[key] - before[key]


def summarise(cfg: SoakConfig, url: str, info: dict, rec: Recorder, before: dict | None,
              after: dict | None, steady_end: float) -> dict[str, Any]:  # fmt: skip
    intervals = [v for _, v in rec.intervals]
    g2g = [v for _, v in rec.g2g]
    probes = [s.probe for s in rec.sessions if s.probe is not None]
    a2e = [v for p in probes for _, v in p.latencies]
    chunks, misses = _delta(before, after, "chunks"), _delta(before, after, "misses")
    session_minutes = sum(s.streamed_s for s in rec.sessions) / 60.0
    warm = cfg.ramp + max(10.0, 0.1 * cfg.seconds)
    mem = [s for s in rec.samples if s.get("rss_mb") is not None and s["t"] <= steady_end]
    levels = [s["degrade_level"] for s in rec.samples if s.get("degrade_level") is not None]
    steady = [s for s in mem if s["t"] >= warm] if len([s for s in mem if s["t"] >= warm]) >= 3 else mem
    users_to_end = {s.user for s in rec.sessions if s.to_end and s.ended is None}
    lost = [s for s in rec.sessions if s.ended is not None]
    server_refused = _delta(before, after, "refused")
    result: dict[str, Any] = {
        "name": cfg.name,
        "url": url,
        "transport": cfg.transport,
        "seconds": cfg.seconds,
        "sessions_requested": cfg.sessions,
        "sessions": len(users_to_end),
        "sessions_started": len(rec.sessions),
        "lost": len(lost),
        "errors": len(rec.errors),
        "refused": len(rec.refusals),
        "refused_server": server_refused,
        "refusal_reasons": dict(Counter(rec.refusals)),
        "miss_rate": round(misses / chunks, 5) if chunks else None,
        "server_chunks": chunks,
        "server_misses": misses,
        "ttff_p50_s": pct(rec.ttff, 50),
        "ttff_p99_s": pct(rec.ttff, 99),
        "interval_p50_s": pct(intervals, 50),
        "interval_p95_s": pct(intervals, 95),
        "interval_p99_s": pct(intervals, 99),
        "interval_max_s": round(max(intervals), 5) if intervals else None,
        "arrival_interval_p99_s": pct(rec.arrivals, 99),
        "stalls": sum(s.stalls for s in rec.sessions),
        "stalls_per_min": round(sum(s.stalls for s in rec.sessions) / session_minutes, 4)
        if session_minutes
        else None,
        "glass_to_glass_p50_s": pct(g2g, 50),
        "glass_to_glass_p99_s": pct(g2g, 99),
        "action_to_effect_p50_s": pct(a2e, 50),
        "action_to_effect_p99_s": pct(a2e, 99),
        "action_to_effect_samples": len(a2e),
        "action_to_effect_unanswered": sum(p.unanswered for p in probes),
        "game_sessions_readable": sum(bool(p.readable) for p in probes),
        "game_sessions": len(probes),
        "frames": rec.frames,
        "clients_without_frames": sum(s.frames == 0 for s in rec.sessions),
        "client_frames_dropped": sum(s.dropped for s in rec.sessions),
        "server_frames_dropped": _delta(before, after, "frames_dropped"),
        "fps_session": sorted({s.fps for s in rec.sessions}),
        "rss_start_mb": round(mem[0]["rss_mb"], 2) if mem else None,
        "rss_end_mb": round(mem[-1]["rss_mb"], 2) if mem else None,
        "rss_max_mb": round(max(s["rss_mb"] for s in mem), 2) if mem else None,
        "rss_slope_mb_per_min": slope_per_minute([s["t"] for s in steady], [s["rss_mb"] for s in steady]),
        "rss_after_minus_before_mb": round(d, 2)
        if (d := _delta(before, after, "rss_mb")) is not None
        else None,
        "fds_start": mem[0]["fds"] if mem else None,
        "fds_max": max((s["fds"] or 0) for s in mem) if mem else None,
        "fds_end": mem[-1]["fds"] if mem else None,
        "fd_slope_per_min": slope_per_minute([s["t"] for s in steady], [s["fds"] or 0 for s in steady]),
        "fds_after_minus_before": _delta(before, after, "fds"),
        # The overload policy's level over the run (0: every session at its admitted rate), from
        # the `/metrics` samples; null against a server that does not export it.
        "degrade_level_max": max(levels) if levels else None,
        "degrade_level_mean": round(sum(levels) / len(levels), 3) if levels else None,
        "server": {k: info.get(k) for k in ("model", "fps", "steps", "scheduler", "capacity", "compute_dtype")},
        "error_samples": rec.errors[:MAX_ERROR_SAMPLES],
    }
    return result


def details(rec: Recorder) -> dict[str, Any]:
    """Per-client figures and the time series, for the JSON file (not the last line)."""
    clients = [{
        "user": s.user, "transport": s.transport, "scene": s.scene, "prompt": s.prompt,
        "session_id": s.session_id, "fps": s.fps, "frames": s.frames, "ttff_s": s.ttff_s,
        "dropped": s.dropped, "stalls": s.stalls, "streamed_s": round(s.streamed_s, 3),
        "ended_early": s.ended, "to_end": s.to_end,
        "action_to_effect_s": [round(v, 4) for _, v in s.probe.latencies] if s.probe else None,
        "readable": s.probe.readable if s.probe else None,
    } for s in rec.sessions]  # fmt: skip
    return {"clients": clients, "samples": rec.samples, "windows": windows(rec)}


def windows(rec: Recorder, width: float | None = None) -> list[dict[str, Any]]:
    """Latency percentiles per time window (for the plot)."""
    end = max([t for t, _ in rec.intervals] + [t for t, _ in rec.g2g] + [1.0])
    width = width or max(2.0, end / 60)
    out = []
    for lo in np.arange(0.0, end, width):
        iv = [v for t, v in rec.intervals if lo <= t < lo + width]
        gg = [v for t, v in rec.g2g if lo <= t < lo + width]
        out.append({"t": round(float(lo + width / 2), 2), "interval_p50_s": pct(iv, 50), "interval_p99_s": pct(iv, 99),
                    "g2g_p50_s": pct(gg, 50), "g2g_p99_s": pct(gg, 99)})  # fmt: skip
    return out


def plot(path: Path, result: dict[str, Any], extra: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    win, samples = extra["windows"], extra["samples"]
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(9, 9), sharex=True)
    t = [w["t"] for w in win]
    for key, style in (
        ("interval_p50_s", "-"),
        ("interval_p99_s", "--"),
        ("g2g_p50_s", "-"),
        ("g2g_p99_s", "--"),
    ):
        ax1.plot(t, [np.nan if w[key] is None else 1000 * w[key] for w in win], style, label=key[:-2])
    ax1.set_ylabel("ms")
    ax1.set_title(f"soak {result['name']}: frame interval and glass-to-glass percentiles")
    ax1.legend(fontsize=8)
    ts = [s["t"] for s in samples]
    ax2.step(ts, [s["clients_active"] for s in samples], where="post", label="client sessions")
    ax2.step(
        ts, [s["sessions_server"] or 0 for s in samples], where="post", label="server sessions", alpha=0.7
    )
    ax2.set_ylabel("sessions")
    ax2.legend(fontsize=8)
    ax3.plot(ts, [s["rss_mb"] if s["rss_mb"] is not None else np.nan for s in samples], label="RSS (MB)")
    ax3.set_ylabel("server RSS (MB)")
    ax3.set_xlabel("seconds")
    fds = ax3.twinx()
    fds.plot(
        ts,
        [s["fds"] if s["fds"] is not None else np.nan for s in samples],
        color="tab:orange",
        label="open fds",
    )
    fds.set_ylabel("open fds")
    ax3.set_title(f"RSS slope {result['rss_slope_mb_per_min']} MB/min")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
