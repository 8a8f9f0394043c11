"""The embedded model behind the engine's model contract (see streamer/models/base.py).

Wraps the autoencoder and the causal DiT: prompt text -> vocabulary tokens -> per-layer
cross-attention K/V (once per prompt), batched denoise/commit over KV cache slots, and
decode to uint8 frames. Loads the shipped safetensors with a config check that names the
file and the field or key that does not match.

Device placement follows the Wan adapter: weights, prompt tensors and the KV cache pool live
on the model's device (CPU by default); the engine keeps latents, timesteps, actions and noise
on the CPU, so every call moves its inputs to the device and returns its results on the
input's device and dtype. `precision` "bf16" runs the transformer and the decoder under bf16
autocast on hardware with native bf16; latents, prompt tensors and the KV cache stay fp32
(see docs/model.md, Precision).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ...cache.kv_pool import CacheBatch, KVCachePool, PoolLayout
from ...cache.step_cache import FirstBlockCache
from ..base import Conditioning, ModelSpec, PromptCond
from ..checkpoint import check_state_dict
from ..compiled import check_compile_backend
from ..device import resolve_device
from ..precision import DTYPES, autocast, check_precision
from . import vocab
from .atomic_save import write_atomically
from .autoencoder import Autoencoder, to_uint8
from .config import ConfigError, EmbeddedConfig
from .dit import BlockRunner, CausalDiT, rotate

WEIGHTS_DIR = Path(__file__).parent / "weights"
# The shipped weights, by the model name `streamer serve --model` and `streamer eval --model` take:
# the wide 6-block student (docs/model.md, "The shipped model"). A name maps to a folder so that
# another size can ship beside it; the 12-block size that did (sessions 24-36) was retired when
# this one beat it on every figure ("Two shipped sizes").
SHIPPED_WEIGHTS = {"embedded": WEIGHTS_DIR}
BOS = len(vocab.WORDS) + 1  # token ids: 0 padding, 1..len(WORDS) words, then BOS


def _check_step_reuse_device(step_cache: FirstBlockCache | None, device: torch.device) -> None:
    # Its per-sample skip decision would stall a GPU for a host sync on every step.
    if step_cache is not None and device.type != "cpu":
        raise ValueError(f"step reuse runs on the CPU only (the model is on {device}): on a GPU its "
                         "per-sample decision would wait for the device on every step")


def prompt_tokens(text: str, max_tokens: int) -> tuple[torch.Tensor, list[str]]:
    """Text -> (max_tokens,) int64 ids [BOS, words..., 0...] and the unknown words."""
    parsed = vocab.parse_prompt(text)
    ids = [BOS, *parsed.token_ids][:max_tokens]
    ids += [0] * (max_tokens - len(ids))
    return torch.tensor(ids, dtype=torch.int64), list(parsed.unknown_words)


class EmbeddedModel:
    """`precision="bf16"` stores the transformer blocks' weights in bf16, in place (a `dit` passed
    in is changed): autocast would otherwise cast them again on every call, measured at 3 ms of
    a 19 ms denoise step at batch 1 on a 2-core CPU."""

    def __init__(self, cfg: EmbeddedConfig, ae: Autoencoder | None = None, dit: CausalDiT | None = None,
                 max_batch: int = 16, device: str | torch.device | None = None, precision: str = "fp32"):
        self.cfg = cfg
        self.precision = precision
        self.ae = (ae or Autoencoder(cfg.autoencoder)).eval()
        self.dit = (dit or CausalDiT(cfg.dit)).eval()
        # channels_last roughly halves the decoder's time on CPU (measured 5.9 -> 2.9 ms/frame).
        self.ae.decoder.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        # Acceleration switches, off until configure_caching() turns them on (docs/caching.md).
        self.step_cache: FirstBlockCache | None = None
        self.commit_reuse = False
        self._null_prompt: PromptCond | None = None  # the empty prompt, encoded on first guidance
        # None keeps the modules where they are (freshly built: the CPU).
        self.device = next(self.dit.parameters()).device
        self.to(device if device is not None else self.device)
        if precision == "bf16":
            self.dit.blocks.to(torch.bfloat16)
        d, a = cfg.dit, cfg.autoencoder
        grid = a.image_size // a.downsample
        self.spec = ModelSpec(
            name="embedded",
            frames_per_chunk=cfg.frames_per_chunk,
            height=a.image_size,
            width=a.image_size,
            fps=cfg.fps,
            latent_shape=(cfg.frames_per_chunk, a.latent_channels, grid, grid),
            default_steps=len(cfg.timesteps),
            timesteps=tuple(cfg.timesteps),
            sink_frames=cfg.sink_frames,
            window_frames=cfg.window_frames,
            conditioning=("text", "action", "control"),
            num_actions=d.num_actions,
            control_dim=d.control_dim,
            max_batch=max_batch,
            shift=cfg.timestep_shift,
            context_noise=cfg.context_noise,
        )
        self.layout = PoolLayout(
            layers=d.depth, heads=d.heads, head_dim=d.head_dim, tokens_per_frame=d.tokens_per_frame,
            sink_frames=cfg.sink_frames, window_frames=cfg.window_frames,
            frames_per_chunk=cfg.frames_per_chunk,
        )

    @property
    def compute_dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    @property
    def records_batch_sizes(self) -> bool:
        return self.dit.records_cuda_graphs

    def to(self, device: str | torch.device) -> EmbeddedModel:
        """Move the weights to `device` (a pool made earlier stays where it was made).

        The precision is checked first: bf16 on a device without native bf16 is a PrecisionError;
        so is step reuse, which runs on the CPU only (see `configure_caching`).
        """
        dev = resolve_device(device)
        check_precision(self.precision, dev)
        _check_step_reuse_device(self.step_cache, dev)
        self.device = dev
        self.ae.to(self.device)
        self.dit.to(self.device)
        return self

    # -- loading ----------------------------------------------------------------------------
    @classmethod
    def load(cls, weights: Path | str | None = None, max_batch: int = 16,
             device: str | torch.device | None = None, precision: str = "fp32") -> EmbeddedModel:
        """Load `<dir>/embedded.safetensors` + `<dir>/embedded.json` (default: the shipped ones).

        `device` (default the CPU) and `precision` are checked before the file is read, so a
        missing GPU or bf16 unit is reported as such rather than after the weights are loaded.
        """
        dev = resolve_device(device)
        check_precision(precision, dev)
        path = Path(weights) if weights is not None else WEIGHTS_DIR
        if not path.exists():
            raise ConfigError(f"weights not found: {path} (no such file or folder)")
        if path.is_dir():
            wfile, cfile = path / "embedded.safetensors", path / "embedded.json"
        else:
            wfile, cfile = path, path.with_suffix(".json")
        cfg = EmbeddedConfig.load(cfile)
        if not wfile.is_file():
            raise ConfigError(f"weights file not found: {wfile}")
        try:
            state = load_file(str(wfile))
        except Exception as exc:  # safetensors raises several types for corrupt files
            raise ConfigError(f"{wfile}: cannot read safetensors ({exc})") from exc
        model = cls(cfg, max_batch=max_batch, device=dev, precision=precision)
        model.load_state(state, str(wfile))
        return model

    def state_dict(self) -> dict[str, torch.Tensor]:
        out = {f"ae.{k}": v for k, v in self.ae.state_dict().items()}
        out.update({f"dit.{k}": v for k, v in self.dit.state_dict().items()})
        return {k: v.contiguous() for k, v in out.items()}

    def load_state(self, state: dict[str, torch.Tensor], source: str) -> None:
        expected = self.state_dict()
        check_state_dict(expected, state, source, ConfigError)
        state = {k: v.to(expected[k].dtype) for k, v in state.items()}
        self.ae.load_state_dict({k[3:]: v for k, v in state.items() if k.startswith("ae.")})
        self.dit.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("dit.")})

    def save(self, directory: Path, dtype: torch.dtype = torch.float16) -> None:
        """Weights are shipped in fp16 (half the bytes; a loaded model computes in its precision)."""
        if self.precision != "fp32":
            raise ValueError(f"save() needs an fp32 model: this {self.precision} model's weights are rounded")
        directory.mkdir(parents=True, exist_ok=True)
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in self.state_dict().items()}
        write_atomically(directory / "embedded.safetensors", lambda tmp: save_file(state, str(tmp)))
        self.cfg.save(directory / "embedded.json")

    # -- the model contract -------------------------------------------------------------------
    def new_pool(self, num_slots: int) -> KVCachePool:
        return KVCachePool(self.layout, num_slots, device=self.device)

    def configure_caching(self, step_reuse: float | None, commit_reuse: bool) -> None:
        """Switch the acceleration techniques (docs/caching.md); None and False is the exact path.

        Not both at once: a step that reuses leaves an earlier step's deep-block keys in the
        scratch frames, and commit reuse would make those the history.
        """
        if step_reuse is not None and commit_reuse:
            raise ValueError("step reuse and commit reuse cannot be combined: a reused step leaves an "
                             "earlier step's keys in the cache, which commit reuse would keep")
        step_cache = None if step_reuse is None else FirstBlockCache(step_reuse)
        _check_step_reuse_device(step_cache, self.device)
        self.step_cache, self.commit_reuse = step_cache, commit_reuse

    def compile(self, mode: str = "default") -> None:
        """torch.compile the transformer blocks' maths (docs/model.md, "Compiled blocks").

        Graphs compile on their first calls (seconds each; the engine's start-up calibration
        makes them), and their shapes are dynamic, so new batch sizes do not recompile. Weights
        must be loaded before. A machine whose inductor backend cannot build code, or a mode it
        cannot run (`compiled.MODES`; "reduce-overhead" needs a GPU), is a CompileError.
        """
        check_compile_backend(self.device, mode)
        self.dit.compile_blocks(mode)

    @property
    def compiled(self) -> bool:
        """Whether compile() switched torch.compile on (the blocks know)."""
        return self.dit.compiled

    def configure_guidance(self, scale: float | None = None, min_t: float | None = None) -> None:
        """Override the config's classifier-free guidance (None keeps a value); scale 1 is off."""
        scale = self.cfg.guidance_scale if scale is None else float(scale)
        min_t = self.cfg.guidance_min_t if min_t is None else float(min_t)
        if not (scale > 0 and 0.0 <= min_t <= 1.0):
            raise ValueError(f"guidance needs scale > 0 and 0 <= min_t <= 1 (got scale {scale}, min_t {min_t})")
        self.cfg = dataclasses.replace(self.cfg, guidance_scale=scale, guidance_min_t=min_t)

    def caching_stats(self) -> dict[str, float]:
        """Counters of the techniques switched on (step reuse: samples seen, samples reused)."""
        if self.step_cache is None:
            return {}
        sc = self.step_cache
        return {"step_reuse_samples": sc.calls, "step_reuse_hits": sc.hits, "step_reuse_hit_rate": sc.hit_rate}

    @torch.no_grad()
    def encode_prompt(self, texts: list[str]) -> list[PromptCond]:
        """Prompt tensors stay on the model's device, in fp32: every step of every session reads them."""
        toks, unknown = zip(*(prompt_tokens(t, self.cfg.dit.max_tokens) for t in texts), strict=True)
        conds = self.encode_tokens(torch.stack(toks))
        for c, t, u in zip(conds, texts, unknown, strict=True):
            c.text, c.unknown_words = t, u
        return conds

    def encode_tokens(self, tokens: torch.Tensor) -> list[PromptCond]:
        """Prompts already made token ids (N, max_tokens), as training clips carry them, with no text."""
        with autocast(self.precision, self.device):  # the blocks' cross-attention K/V projections
            enc = {k: v.float() for k, v in self.dit.encode_text(tokens.to(self.device)).items()}
        return [PromptCond(text="", tensors={"kv": enc["kv"][i], "pooled": enc["pooled"][i]})
                for i in range(len(tokens))]

    def _text(self, prompts: list[PromptCond]) -> dict[str, torch.Tensor]:
        """Stack per-sample prompt tensors; one prompt is shared by all frames of a chunk."""
        dev = self.device  # a no-op for prompts this model encoded
        kv = torch.stack([p.tensors["kv"].to(dev) for p in prompts])  # (B, depth, 2, H, L, Dh)
        pooled = torch.stack([p.tensors["pooled"].to(dev) for p in prompts])  # (B, D)
        return {"kv": kv[:, None], "pooled": pooled[:, None]}

    def _forward(self, x: torch.Tensor, t: torch.Tensor, cond: Conditioning, cache: CacheBatch,
                 runner: BlockRunner | None = None) -> torch.Tensor:
        """x (B, F, C, h, w) and t (B,) on the model's device, fp32 -> velocity (B, F, C, h, w), fp32."""
        b, f = x.shape[:2]
        frame_t = t[:, None].expand(b, f)
        actions, controls = cond.actions.to(self.device), cond.controls.to(self.device, torch.float32)
        with autocast(self.precision, self.device):
            v = self.dit(x, frame_t, self._text(cond.prompts), actions, controls, cache, runner)
        return v.float()

    @torch.no_grad()
    def denoise(self, x: torch.Tensor, t: torch.Tensor, cond: Conditioning, cache: CacheBatch) -> torch.Tensor:
        """x (B, F, C, h, w) at times t (B,) -> x0 estimate (B, F, C, h, w), on x's device and dtype."""
        runner = None if self.step_cache is None else self.step_cache.runner(cache)
        xd, td = x.to(self.device, torch.float32), t.to(self.device, torch.float32)
        guided = self._guided_rows(t)
        # The unconditional pass runs first: both passes write the chunk's keys/values to the
        # same scratch frames, and the conditional ones must be what stays there.
        v_uncond = self._forward(xd[guided], td[guided], self._unconditional(cond, guided),
                                 cache.subset(guided)) if guided else None
        v = self._forward(xd, td, cond, cache, runner)
        if v_uncond is not None:
            rows = torch.tensor(guided, device=v.device)
            v[rows] = torch.lerp(v_uncond, v[rows], self.cfg.guidance_scale)  # vu + s * (vc - vu)
        return (xd - td.view(-1, 1, 1, 1, 1) * v).to(x.device, x.dtype)

    def _guided_rows(self, t: torch.Tensor) -> list[int]:
        """Batch rows that get classifier-free guidance (t is on the host: no device sync)."""
        if self.cfg.guidance_scale == 1.0:
            return []
        return [i for i, ti in enumerate(t.tolist()) if ti >= self.cfg.guidance_min_t]

    def _unconditional(self, cond: Conditioning, rows: list[int]) -> Conditioning:
        """The same actions and controls under the empty prompt (what training drops prompts to)."""
        if self._null_prompt is None:
            self._null_prompt = self.encode_prompt([""])[0]
        idx = torch.tensor(rows)
        return Conditioning(prompts=[self._null_prompt] * len(rows), actions=cond.actions[idx],
                            controls=cond.controls[idx])

    @torch.no_grad()
    def commit(self, x0: torch.Tensor, cond: Conditioning, cache: CacheBatch,
               noise: torch.Tensor | None = None) -> None:
        """Run the finished chunk at t = context_noise (0: clean; above, noised with `noise`)
        so its keys/values enter the cache.

        With `commit_reuse` that pass is skipped and the keys/values the last denoising step
        left in the scratch frames are kept instead (cheaper, slightly noisier context).
        A chunk no denoise pass wrote (a recache commits kept latents) still gets its pass.
        """
        if not cache.commit:
            raise ValueError("commit() needs a cache batch made with commit=True")
        t_c = self.cfg.context_noise
        if t_c > 0 and (noise is None or noise.shape != x0.shape):
            raise ValueError(f"commit() of a model with context_noise {t_c} needs noise of x0's shape "
                             f"{tuple(x0.shape)}, got {None if noise is None else tuple(noise.shape)}")
        if not (self.commit_reuse and all(cache.pool.scratch_denoised[s] for s in cache.slots)):
            xd = x0.to(self.device, torch.float32)
            if t_c > 0:
                assert noise is not None
                xd = torch.lerp(xd, noise.to(self.device, torch.float32), t_c)  # flow matching's x_t
            self._forward(xd, torch.full((xd.shape[0],), t_c, device=self.device), cond, cache)
        rope = self.dit.rope

        def rotate_back(keys: torch.Tensor, frames: int) -> torch.Tensor:
            return rotate(keys, *rope.time_rotation(-float(frames)))

        cache.finish(rotate_back)

    @torch.no_grad()
    def decode(self, x0: torch.Tensor) -> torch.Tensor:
        """x0 (B, F, C, h, w) -> uint8 frames (B, F, H, W, 3) on x0's device (the engine's: the CPU)."""
        b, f = x0.shape[:2]
        xd = x0.to(self.device, torch.float32)
        z = (xd.reshape(b * f, *xd.shape[2:]) / self.cfg.latent_scale).contiguous(
            memory_format=torch.channels_last
        )
        with autocast(self.precision, self.device):
            img = self.ae.decoder(z)
        img = to_uint8(img.float())  # uint8 before the copy back: a quarter of the bytes
        return img.reshape(b, f, *img.shape[1:]).to(x0.device)

    @torch.no_grad()
    def encode_frames(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 (N, H, W, 3) -> latents (N, C, h, w) fp32 on frames' device, scaled to unit variance."""
        from .autoencoder import to_unit

        z = self.ae.encoder(to_unit(frames.to(self.device))) * self.cfg.latent_scale
        return z.to(frames.device)
