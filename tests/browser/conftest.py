"""Fixtures for the browser suite: real `streamer serve` subprocesses and Debian's Chromium.

Every test here drives web/ in headless Chromium through Playwright's sync API, against a
server started as a user would start it. Chromium is `/usr/bin/chromium` (never a downloaded
browser), launched with the flags measured in shared/PROBES.md; without it, or without the
`playwright` package, the suite is skipped with the reason.

Servers:
- `tiny_server`: `--config tiny-random --max-sessions 1 --utilisation-bound 100 --steps 1
  --fps 8` (fast random pixels, admission by session count only) for plumbing; each test that
  uses it waits until the server holds no session, so the one slot is free.
- `model_server`: the shipped embedded model, for the tests that read prompts and actions
  back from the pixels. It fails (never skips) when the model cannot load. With
  `STREAMER_BROWSER_MODEL_URL=http://host:port` those tests run against that server instead.

Artifacts (screenshots, measured figures) go to `$STREAMER_ARTIFACTS_DIR`, or `artifacts/`
under pytest's base temp dir.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    # Without it Chromium offers only mDNS (.local) candidates (shared/PROBES.md).
    "--disable-features=WebRtcHideLocalIpsWithMdns",
    # A fake microphone (a beeping tone) and no permission prompt, for the avatar test.
    "--use-fake-device-for-media-stream",
    "--use-fake-ui-for-media-stream",
]
SERVER_START_S = 180.0  # bounds a hang (model load + calibration on a busy 2-core machine)
WAIT_MS = 30_000  # default Playwright wait: generous, never a timing assertion

try:
    from playwright.sync_api import Browser, Page, sync_playwright
except ImportError:  # pragma: no cover - depends on the environment
    sync_playwright = None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = None
    if sync_playwright is None:
        reason = "the `playwright` package is not installed (pip install -e '.[test]')"
    elif not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install -y chromium)"
    here = Path(__file__).parent
    for item in items:
        if Path(item.fspath).is_relative_to(here) and reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def _serve_command() -> list[str]:
    script = Path(sys.executable).with_name("streamer")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "streamer.cli"]  # the project is not installed, only on the path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    process: subprocess.Popen | None  # None: started elsewhere
    log: Path | None

    def info(self) -> dict:
        return httpx.get(f"{self.url}/v1/info", timeout=10).json()

    def wait_idle(self, guard_s: float = 30.0) -> None:
        """Until the server holds no session (the previous test's session has been freed)."""
        deadline = time.monotonic() + guard_s
        while self.info()["sessions"]:
            if time.monotonic() > deadline:
                raise AssertionError(f"server still holds {self.info()['sessions']} session(s)")
            time.sleep(0.1)


_FAILED: dict[str, str] = {}  # a server that failed to start fails the later tests at once


def _start_server(name: str, args: list[str], log_dir: Path) -> Server:
    if name in _FAILED:
        pytest.fail(_FAILED[name])
    try:
        return _launch(name, args, log_dir)
    except pytest.fail.Exception as exc:
        _FAILED[name] = str(exc)
        raise


def _launch(name: str, args: list[str], log_dir: Path) -> Server:
    port = _free_port()
    log = log_dir / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [*_serve_command(), "serve", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--log-level", "warning", *args]
    with log.open("w") as out:
        process = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + SERVER_START_S
    while True:
        if process.poll() is not None:
            tail = log.read_text()[-3000:]
            pytest.fail(f"`streamer serve {' '.join(args)}` exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return Server(url, process, log)
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"`streamer serve {' '.join(args)}` not healthy after {SERVER_START_S:.0f}s")
        time.sleep(0.2)


def _stop_server(server: Server) -> None:
    server.process.terminate()  # SIGTERM drains the sessions, then exits
    try:
        server.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


@pytest.fixture(scope="package")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = Path(os.environ.get("STREAMER_ARTIFACTS_DIR") or tmp_path_factory.getbasetemp() / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="package")
def measurements(artifacts: Path) -> Iterator[dict]:
    """Figures the tests measured (time to first frame...), written to measurements.json."""
    figures: dict = {}
    yield figures
    (artifacts / "measurements.json").write_text(json.dumps(figures, indent=2, sort_keys=True))


@pytest.fixture(scope="package")
def _tiny_server(artifacts: Path) -> Iterator[Server]:
    # Admission by session count only: on a busy machine the predicted utilisation of even one
    # stream can pass the default bound, and these tests check the page, not admission control.
    # One denoising step at 8 fps keeps the server light; the plumbing does not care.
    args = ["--config", "tiny-random", "--max-sessions", "1", "--utilisation-bound", "100"]
    args += ["--steps", "1", "--fps", "8"]
    server = _start_server("tiny", args, artifacts)
    yield server
    _stop_server(server)


@pytest.fixture
def tiny_server(_tiny_server: Server) -> Server:
    _tiny_server.wait_idle()
    return _tiny_server


@pytest.fixture(scope="package")
def model_server(artifacts: Path) -> Iterator[Server]:
    external = os.environ.get("STREAMER_BROWSER_MODEL_URL")
    if external:  # a server started elsewhere (another model, a GPU machine); left running
        yield Server(external.rstrip("/"), None, None)  # type: ignore[arg-type]
        return
    server = _start_server("model", [], artifacts)
    yield server
    _stop_server(server)


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


OpenPage = Callable[..., "Page"]


@pytest.fixture
def open_page(browser: Browser, artifacts: Path, request: pytest.FixtureRequest) -> Iterator[OpenPage]:
    """Open the demo page of a server in a fresh context; stop its stream after the test."""
    contexts = []
    pages: list[Page] = []
    console: list[str] = []

    def _open(server: Server, width: int = 1280, height: int = 860) -> Page:
        ctx = browser.new_context(
            viewport={"width": width, "height": height}, permissions=["microphone"], color_scheme="dark"
        )
        contexts.append(ctx)
        page = ctx.new_page()
        page.set_default_timeout(WAIT_MS)
        page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
        page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
        page.goto(server.url + "/")
        page.wait_for_function("window.streamerDemo !== undefined")
        pages.append(page)
        return page

    yield _open
    for page in pages:
        try:
            if page.evaluate("['connecting', 'admitted'].includes(streamerDemo.state)"):
                page.click("#stop")
                page.wait_for_function(
                    "!['connecting', 'admitted'].includes(streamerDemo.state)", timeout=10_000
                )
        except Exception:  # best effort: the server frees the sessions of closed peers too
            pass
    for ctx in contexts:
        ctx.close()
    errors = [line for line in console if line.startswith("[pageerror]")]
    (artifacts / f"{request.node.name}.console.txt").write_text("\n".join(console))
    assert not errors, f"uncaught errors in the page: {errors}"
