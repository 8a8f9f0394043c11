"""Dispatch: the reference on CPU unless forced, Triton on CUDA where it pays, and `import kernels` without Triton."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import kernels
from kernels._triton import HAS_TRITON

pytestmark = pytest.mark.kernels


def test_cpu_defaults_to_reference_even_when_interpreting(monkeypatch):
    choice = kernels.backend("cpu")
    assert choice.name == "reference" and "cpu" in choice.reason

    def boom(*args, **kwargs):
        raise AssertionError("the Triton path ran on CPU without STREAMER_KERNELS=triton")

    for name in (
        "chunk_attention_triton",
        "int8_chunk_attention_triton",
        "modulate_triton",
        "gated_residual_triton",
    ):
        monkeypatch.setattr(kernels, name, boom)
    q, k, v = torch.randn(1, 1, 4, 16), torch.randn(2, 1, 8, 16), torch.randn(2, 1, 8, 16)
    kernels.chunk_attention(q, k, v, slots=[1], lengths=[5])
    kernels.int8_chunk_attention(q, k, v, slots=[1], lengths=[5])
    x, vec = torch.randn(1, 1, 2, 16), torch.randn(1, 1, 1, 16)
    kernels.modulate(x, vec, vec)
    kernels.gated_residual(x, vec, x)


def test_inputs_needing_gradients_take_the_reference(monkeypatch):
    """The Triton kernels are forward-only: training through them must still get gradients."""
    monkeypatch.setenv("STREAMER_KERNELS", "triton" if HAS_TRITON else "reference")

    def boom(*args, **kwargs):
        raise AssertionError("the forward-only Triton path ran on inputs that need gradients")

    monkeypatch.setattr(kernels, "modulate_triton", boom)
    monkeypatch.setattr(kernels, "chunk_attention_triton", boom)
    x, vec = torch.randn(1, 1, 2, 16, requires_grad=True), torch.randn(1, 1, 1, 16)
    kernels.modulate(x, vec, vec).sum().backward()
    assert x.grad is not None
    q = torch.randn(1, 1, 4, 16, requires_grad=True)
    k = torch.randn(1, 1, 8, 16)
    kernels.chunk_attention(q, k, k, slots=[0], lengths=[8]).sum().backward()
    assert q.grad is not None


def test_cuda_picks_triton_when_installed():
    choice = kernels.backend("cuda")  # a device name: no GPU is touched
    assert choice.name == ("triton" if HAS_TRITON else "reference"), choice


def test_env_forces(monkeypatch):
    monkeypatch.setenv("STREAMER_KERNELS", "reference")
    assert kernels.backend("cuda").name == "reference"
    monkeypatch.setenv("STREAMER_KERNELS", "bogus")
    with pytest.raises(ValueError, match="STREAMER_KERNELS"):
        kernels.backend("cpu")


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed: pip install -e .[triton]")
def test_forced_triton_on_cpu_needs_the_interpreter(monkeypatch):
    monkeypatch.setenv("STREAMER_KERNELS", "triton")
    assert kernels.backend("cpu").name == "triton"  # the conftest sets TRITON_INTERPRET=1
    monkeypatch.delenv("TRITON_INTERPRET")
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        kernels.backend("cpu")


def test_import_and_reference_without_triton():
    """With triton unimportable, `import kernels` works and says what to install when forced."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "import importlib.util; importlib.util.find_spec = lambda name, *a: None\n"
        "import os, torch, kernels\n"
        "assert kernels.backend('cuda').name == 'reference', kernels.backend('cuda')\n"
        "print(kernels.backend('cuda').reason)\n"
        "q, k = torch.randn(1, 1, 4, 16), torch.randn(1, 1, 8, 16)\n"
        "kernels.chunk_attention(q, k, k, slots=[0], lengths=[8])\n"
        "os.environ['STREAMER_KERNELS'] = 'triton'\n"
        "try:\n    kernels.backend('cuda')\nexcept ImportError as e:\n    print(e)\n"
    )
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("pip install -e .[triton]") == 2, run.stdout


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed: pip install -e .[triton]")
def test_interpreter_set_after_triton_was_imported_is_explained():
    """Triton fixes interpreter-or-compiler at import: a late TRITON_INTERPRET gets a clear error."""
    code = (
        "import os, torch, triton.language\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        "from kernels.modulation import modulate_triton\n"
        "x = torch.randn(1, 1, 2, 16)\n"
        "try:\n    modulate_triton(x, x[:, :, :1], x[:, :, :1])\nexcept RuntimeError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    assert "set TRITON_INTERPRET in the environment the process starts with" in run.stdout, run.stdout


def test_dispatch_reads_tritons_version_once(monkeypatch):
    """The version goes into every CUDA call's reason; reading package metadata per call cost
    130 us here (and every Triton launch paid it before it was cached)."""
    import importlib.metadata

    from kernels import _triton

    calls = []
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda name: calls.append(name) or real(name))
    monkeypatch.setattr(_triton, "HAS_TRITON", True)
    monkeypatch.setattr(kernels.dispatch, "HAS_TRITON", True)
    _triton.triton_version.cache_clear()
    try:
        for _ in range(5):
            kernels.backend("cuda")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("triton is not installed")
    finally:
        _triton.triton_version.cache_clear()
    assert calls == ["triton"]


@pytest.mark.parametrize("triton", [False, True])
def test_indices_stay_on_the_host_for_the_references(monkeypatch, triton):
    """The references loop over the indices on the host: sending them to the tensors' device
    would make every call read them back (a sync per call on a GPU). Triton gets them there.
    The meta device stands in for a GPU: tensors with a device, but no data to compute on."""
    seen = {}

    def record(q, kv, scale=None):
        seen["rows"], seen["lengths"] = kv.rows.device.type, kv.lengths.device.type
        return q

    monkeypatch.setattr(kernels, "use_triton", lambda *t, **kw: triton)
    monkeypatch.setattr(kernels, "chunk_attention_triton" if triton else "chunk_attention_reference", record)
    q, k = torch.empty(2, 1, 4, 16, device="meta"), torch.empty(3, 1, 8, 16, device="meta")
    kernels.chunk_attention(q, k, k, slots=[2, 0], lengths=[5, 8])
    want = "meta" if triton else "cpu"
    assert seen == {"rows": want, "lengths": want}


@pytest.mark.skipif(not HAS_TRITON, reason="Triton is not installed: pip install -e .[triton]")
def test_code_under_torch_compile_takes_the_reference(monkeypatch):
    """Inductor compiles the reference's ops (fused, in its CUDA graphs on a GPU); a Triton launch
    inside a compiled region would stay opaque. Forced Triton still runs outside compile."""
    monkeypatch.setenv("STREAMER_KERNELS", "triton")  # the conftest sets TRITON_INTERPRET=1
    x, vec = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 1, 16)
    calls = []
    real = kernels.modulate_triton
    monkeypatch.setattr(kernels, "modulate_triton", lambda *a, **k: calls.append(1) or real(*a, **k))
    kernels.modulate(x, vec, vec)
    assert calls == [1]
    torch._dynamo.reset()
    compiled = torch.compile(lambda a, b: kernels.modulate(a, b, b), backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, vec), kernels.modulate_reference(x, vec, vec))
    assert calls == [1]


def test_default_dispatch_takes_triton_only_where_it_measured_faster(monkeypatch):
    """With Triton available for the tensors (stood in for a GPU), attention takes it for several
    sessions' short chunks only, the modulations for large activations only; forcing Triton
    takes it for every shape."""
    monkeypatch.setattr(kernels.dispatch, "backend", lambda device=None: kernels.Choice("triton", "a GPU"))
    ran: list[str] = []

    def spy(name):
        def run(q, *args, **kwargs):
            ran.append(name)
            return q

        return run

    for name in ("chunk_attention_triton", "modulate_triton", "gated_residual_triton"):
        monkeypatch.setattr(kernels, name, spy(name))

    def attention(b, nq):
        q, k = torch.randn(b, 1, nq, 16), torch.randn(b, 1, 8, 16)
        kernels.chunk_attention(q, k, k, slots=list(range(b)), lengths=[8] * b)

    def modulations(numel):
        x, vec = torch.zeros(1, 1, numel // 16, 16), torch.zeros(1, 1, 1, 16)
        kernels.modulate(x, vec, vec)
        kernels.gated_residual(x, vec, x)

    attention(1, 4)  # a batch of one: SDPA
    attention(2, kernels.ATTENTION_TRITON_MAX_QUERIES + 1)  # long chunks: SDPA
    modulations(kernels.MODULATION_TRITON_MIN_ELEMENTS // 2)
    assert ran == []
    attention(2, 4)
    modulations(kernels.MODULATION_TRITON_MIN_ELEMENTS)
    assert ran == ["chunk_attention_triton", "modulate_triton", "gated_residual_triton"]
    ran.clear()
    monkeypatch.setenv("STREAMER_KERNELS", "triton")
    attention(1, 4)
    modulations(16)
    assert ran == ["chunk_attention_triton", "modulate_triton", "gated_residual_triton"]
