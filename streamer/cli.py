"""`streamer` command line: `serve`, `client`, `protocol-schema`, and `eval` (the model evaluator).

    streamer serve [--host 127.0.0.1] [--port 8000] [--model embedded|wan-causal] [--device cpu|cuda]
                   [--precision auto|fp32|bf16] [--guidance S] [--fps F] ...
    streamer client --url http://H:P --transport ws|webrtc --prompt TEXT --frames N [--out F.mp4] --json
    streamer protocol-schema [--markdown]
    streamer eval ...            (streamer.models.embedded.evaluate_cli)

Heavy imports (torch, the engine, aiortc) happen inside the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from .argtypes import positive_int


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="embedded",
                   help="embedded (default: the shipped model, real time on a 2-core CPU) or wan-causal "
                        "(a local checkpoint folder in --weights; docs/wan.md)")  # fmt: skip
    p.add_argument("--config", help="model/engine config file")
    p.add_argument("--weights", help="weights file (default: the shipped ones)")
    p.add_argument("--fps", type=float, help="playback rate (default: the model's, or what --fps-for-sessions hold)")
    p.add_argument("--fps-for-sessions", type=positive_int, default=1, metavar="N",
                   help="without --fps, serve each new session the highest rate at which N sessions fit at once, "
                        "as the cost model (calibrated at start-up, learning since) predicts (default 1: the best "
                        "rate for one user; docs/scheduler.md)")  # fmt: skip
    p.add_argument("--steps", type=int, help="denoising steps per chunk (default: the model's)")
    p.add_argument("--max-sessions", type=int, help="admission limit (default: from capacity)")
    p.add_argument("--scheduler", choices=["deadline", "serial"], default="deadline",
                   help="batched deadline scheduler, or the one-stream-at-a-time baseline")  # fmt: skip
    p.add_argument("--utilisation-bound", type=float,
                   help="admit while predicted utilisation stays at or below this (default 0.85)")  # fmt: skip
    p.add_argument("--no-degrade", dest="degrade", action="store_false",
                   help="never cut steps or fps under overload (capacity sweeps at full quality)")  # fmt: skip
    p.add_argument("--step-reuse", type=float, default=None, metavar="THRESHOLD",
                   help="reuse a session's deep blocks when its first block changed less than this "
                        "(relative L1; off by default; embedded model on the CPU; docs/caching.md)")  # fmt: skip
    p.add_argument("--commit-reuse", action="store_true",
                   help="keep the last denoising step's keys instead of a clean commit pass (docs/caching.md)")
    p.add_argument("--codec", choices=["h264", "vp8"], default="h264", help="default WebRTC codec")
    p.add_argument("--bitrate", type=int, default=1_000_000, help="WebRTC start bitrate, bits/s")
    p.add_argument("--max-bitrate", type=int, default=3_000_000, help="WebRTC bitrate cap, bits/s")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where the model runs (default: the CPU for the embedded model; for wan-causal, "
                        "the GPU when there is one)")  # fmt: skip
    # Checked by the model (streamer/models/precision.py), not by choices=: importing that list
    # here would import torch for every subcommand.
    p.add_argument("--precision", default="auto", metavar="auto|fp32|bf16",
                   help="what the embedded model computes in (default auto: bf16 on a CPU with AMX-BF16, where its "
                        "batches run 1.5-1.7x faster at the same quality, fp32 elsewhere; bf16 needs native bf16; "
                        "see docs/model.md)")  # fmt: skip
    p.add_argument("--guidance", type=float, default=None, metavar="SCALE",
                   help="classifier-free guidance scale of the embedded model (default: its weights' "
                        "config; 1 is off; guided steps cost a second model pass; on guidance-distilled weights "
                        "it multiplies the distilled scale, docs/model.md)")  # fmt: skip
    p.add_argument("--compile", action="store_true",
                   help="torch.compile the embedded model's transformer blocks: faster batches, slower "
                        "start (the calibration compiles them; needs a C++ compiler on the CPU; docs/model.md)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch threads for the model (default: torch's choice, one per core)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streamer", description="Real-time streaming video generation server."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _serve_args(sub.add_parser("serve", help="run the server"))
    from streamer.client_cli import add_arguments

    add_arguments(sub.add_parser("client", help="stream from a server and report latency"))
    schema = sub.add_parser("protocol-schema", help="print the wire protocol's JSON schemas")
    schema.add_argument("--markdown", action="store_true", help="as the docs/protocol.md section")
    sub.add_parser("eval", help="evaluate the embedded model (see `streamer eval --help`)", add_help=False)
    return parser


def serve_command(args: argparse.Namespace) -> int:
    from streamer.engine_factory import build_engine
    from streamer.transport.server import print_url, serve
    from streamer.transport.settings import ServerSettings

    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    try:
        engine = build_engine(args)
    except (ValueError, OSError) as exc:  # ConfigError, DeviceError are ValueErrors: bad weights, config, model, device
        print(f"streamer serve: error: {exc}", file=sys.stderr)
        return 2
    settings = ServerSettings(
        video_codec=args.codec, video_bitrate=args.bitrate, video_max_bitrate=args.max_bitrate
    )
    return asyncio.run(serve(engine, settings, args.host, args.port, args.log_level, on_started=print_url))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "eval":
        from streamer.models.embedded.evaluate_cli import main as eval_main

        return int(eval_main(argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve_command(args)
    if args.command == "client":
        from streamer.client_cli import main as client_main

        return client_main(args)
    from streamer.protocol_schema import main as schema_main

    return schema_main(["--markdown"] if args.markdown else [])


if __name__ == "__main__":
    raise SystemExit(main())
