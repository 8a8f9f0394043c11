"""The `streamer` command line: serve (URL line, Ctrl-C drains, exit 0), client (last-line JSON,
MP4, failure exit), protocol-schema, and the `eval` dispatch. The server runs a FakeEngine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import av
import httpx
import pytest
import torch

from streamer import cli
from streamer.client_cli import run
from tests.transport.conftest import server, start_server  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[1]
# `streamer serve` with the engine factory swapped for the fake (the real one loads the model).
SERVE_FAKE = """
import sys, types
from tests.fakes import FakeEngine
sys.modules["streamer.engine_factory"] = types.SimpleNamespace(
    build_engine=lambda args: FakeEngine(fps=args.fps or 30, max_sessions=args.max_sessions or 4))
from streamer.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def _client_args(url: str, **kw) -> object:
    parser = cli.build_parser()
    argv = ["client", "--url", url, "--json"] + [x for k, v in kw.items() for x in (f"--{k}", str(v))]
    return parser.parse_args(argv)


def test_serve_and_client_contract(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    serve = subprocess.Popen(
        [sys.executable, "-c", SERVE_FAKE, "serve", "--port", "0", "--fps", "30", "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = serve.stdout.readline()
        assert line.startswith("streamer: serving on http://127.0.0.1:"), line
        url = line.split(" on ")[1].strip().rstrip("/")
        assert httpx.get(f"{url}/healthz").status_code == 200
        out = tmp_path / "out.mp4"
        client = subprocess.run(
            [sys.executable, "-m", "streamer.cli", "client", "--url", url, "--transport", "ws",
             "--prompt", "red ball", "--frames", "12", "--out", str(out), "--json", "--redirect", "0.1:blue sky"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert client.returncode == 0, client.stderr
        report = json.loads(client.stdout.strip().splitlines()[-1])
        assert report["frames"] == 12 and report["error"] is None
        assert {"ttff_s", "interval_p50_s", "interval_p99_s", "glass_to_glass_p50_s"} <= set(report)
        with av.open(str(out)) as container:
            assert sum(1 for _ in container.decode(video=0)) == 12
    finally:
        serve.send_signal(signal.SIGINT)
        stdout, stderr = serve.communicate(timeout=30)
    assert serve.returncode == 0, stderr


async def test_client_webrtc_report(server):  # noqa: F811
    report, status = await run(_client_args(server.url, transport="webrtc", prompt="a", frames=10))
    assert status == 0 and report["frames"] == 10 and report["ttff_s"] > 0
    assert report["glass_to_glass_p50_s"] is not None


async def test_client_fails_nonzero_when_refused(start_server):  # noqa: F811
    from tests.fakes import FakeEngine

    srv = await start_server(FakeEngine(max_sessions=0))
    report, status = await run(_client_args(srv.url, frames=5))
    assert status == 1 and "refused" in report["error"] and report["frames"] == 0


async def test_client_fails_nonzero_without_server():
    report, status = await run(_client_args("http://127.0.0.1:9", frames=5))
    assert status == 1 and report["error"]


def test_protocol_schema_command(capsys):
    assert cli.main(["protocol-schema"]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert schemas["protocol"] == 1 and "start" in schemas["client"]


def test_eval_dispatches_to_the_model_evaluator(monkeypatch):
    seen = []
    fake = types.SimpleNamespace(main=lambda argv: seen.append(argv) or 0)
    monkeypatch.setitem(sys.modules, "streamer.models.embedded.evaluate_cli", fake)
    assert cli.main(["eval", "--weights", "w.safetensors", "--help-me"]) == 0
    assert seen == [["--weights", "w.safetensors", "--help-me"]]


def test_serve_defaults():
    args = cli.build_parser().parse_args(["serve"])
    assert (args.host, args.port, args.model, args.codec) == ("127.0.0.1", 8000, "embedded", "h264")


@pytest.mark.parametrize("argv", [["client", "--transport", "carrier-pigeon"], ["serve", "--port", "x"]])
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
@pytest.mark.parametrize("extra", [[], ["--config", "tiny-random"]])
def test_serve_device_cuda_without_cuda_exits_2(capsys, extra):
    assert cli.main(["serve", "--device", "cuda", *extra]) == 2
    err = capsys.readouterr().err
    assert "streamer serve: error:" in err and "CUDA is not available" in err and "--device cpu" in err


def test_serve_device_defaults_to_the_models_own():
    assert cli.build_parser().parse_args(["serve"]).device is None
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["serve", "--device", "tpu"])


@pytest.mark.parametrize(("value", "message"), [("0", "must be at least 1, got 0"),
                                              ("-2", "must be at least 1, got -2"),
                                              ("two", "expected a whole number, got 'two'")])
def test_serve_threads_must_be_a_positive_int(capsys, value, message):
    with pytest.raises(SystemExit) as info:
        cli.main(["serve", "--threads", value])
    assert info.value.code == 2
    assert f"streamer serve: error: argument --threads: {message}" in capsys.readouterr().err


def test_serve_sets_torch_threads(monkeypatch):
    before = torch.get_num_threads()

    def stop(args):  # the engine is not needed: the thread count is set before it is built
        raise ValueError("stop here")

    monkeypatch.setattr("streamer.engine_factory.build_engine", stop)
    try:
        assert cli.main(["serve", "--threads", "1"]) == 2
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(("model", "precision", "message"), [
    ("embedded", "fp16", "precision must be one of auto, fp32, bf16, got 'fp16'"),
    ("wan-causal", "fp32", "--precision is for the embedded model"),
])  # fmt: skip
def test_serve_bad_precision_exits_2_naming_it(capsys, model, precision, message):
    assert cli.main(["serve", "--model", model, "--config", "tiny-random", "--precision", precision]) == 2
    err = capsys.readouterr().err
    assert "streamer serve: error:" in err and message in err


def test_serve_bf16_without_native_bf16_exits_2(capsys, monkeypatch):
    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"architecture": "x86_64"})
    assert cli.main(["serve", "--config", "tiny-random", "--precision", "bf16"]) == 2
    assert "no native bf16" in capsys.readouterr().err


@pytest.mark.parametrize(("caps", "dtype"), [({"amx_bf16": True}, "bfloat16"), ({"avx512_bf16": True}, "float32"),
                                           ({"avx2": True}, "float32")])  # fmt: skip
def test_serve_computes_in_bf16_by_default_only_on_a_cpu_with_amx(monkeypatch, caps, dtype):
    from streamer.engine_factory import build_engine

    monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: {"architecture": "x86_64", **caps})
    engine = build_engine(cli.build_parser().parse_args(["serve", "--config", "tiny-random"]))
    assert (engine.info()["compute_dtype"], engine.info()["device"]) == (dtype, "cpu")
    forced = build_engine(cli.build_parser().parse_args(["serve", "--config", "tiny-random", "--precision", "fp32"]))
    assert forced.info()["compute_dtype"] == "float32"


def test_serve_caching_flags_reach_the_engine():
    from streamer.engine_factory import build_engine

    for flags, expected in [([], (None, False)), (["--step-reuse", "0.4"], (0.4, False)),
                            (["--commit-reuse"], (None, True))]:  # fmt: skip
        engine = build_engine(cli.build_parser().parse_args(["serve", "--config", "tiny-random", *flags]))
        caching = engine.info()["caching"]
        assert (caching["step_reuse"], caching["commit_reuse"]) == expected


def test_serve_bad_step_reuse_exits_2_naming_it(capsys):
    assert cli.main(["serve", "--config", "tiny-random", "--step-reuse", "-1"]) == 2
    assert "step reuse threshold must be a number >= 0, got -1.0" in capsys.readouterr().err


def test_serve_guidance_flag_reaches_the_model(capsys):
    from streamer.engine_factory import build_engine

    engine = build_engine(cli.build_parser().parse_args(["serve", "--config", "tiny-random", "--guidance", "2.5"]))
    assert engine.model.cfg.guidance_scale == 2.5
    assert cli.main(["serve", "--config", "tiny-random", "--guidance", "0"]) == 2
    assert "guidance needs scale > 0" in capsys.readouterr().err
    assert cli.main(["serve", "--model", "wan-causal", "--config", "tiny-random", "--guidance", "2"]) == 2
    assert "--guidance is for the embedded model" in capsys.readouterr().err


def test_serve_fps_for_sessions_reaches_the_engine_and_raises_its_session_limit(capsys):
    from streamer.engine_factory import build_engine

    engine = build_engine(cli.build_parser().parse_args(["serve", "--config", "tiny-random", "--fps-for-sessions", "12"]))
    assert (engine.cfg.fps_sessions, engine.cfg.max_sessions) == (12, 12)
    flags = ["--fps-for-sessions", "9", "--max-sessions", "4"]
    assert cli.main(["serve", "--config", "tiny-random", *flags]) == 2
    assert "fps_sessions must be in 1..max_sessions (4), got 9" in capsys.readouterr().err


@pytest.mark.parametrize(("kind", "good", "bad"), [("share", ["0", "1", "0.3"], ["1.01", "-0.1", "x"]),
                                                   ("non_negative", ["0", "2.5"], ["-1", "nan", "x"]),
                                                   ("unit_interval", ["0", "0.99"], ["1", "-0.1", "x"])])
def test_number_types_take_their_range_and_refuse_the_rest(kind, good, bad):
    import argparse

    from streamer import argtypes

    parse = getattr(argtypes, kind)
    assert [parse(v) for v in good] == [float(v) for v in good]
    for value in bad:
        with pytest.raises(argparse.ArgumentTypeError):
            parse(value)
