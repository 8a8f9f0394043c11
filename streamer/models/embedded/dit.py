"""Block-causal diffusion transformer over latent video chunks (pure nn.Module, no I/O).

Tokens are 2x2 patches of latent frames. Each frame carries its own conditioning vector
(flow-matching time, action, controls, pooled prompt) that modulates its tokens (adaLN-Zero);
every block also cross-attends to the prompt's tokens. Positions are 3D RoPE (time, row,
column): a first probe showed a learned absolute embedding makes the model ignore its context.

Self-attention is delegated to an `AttentionContext`, which decides what each query may see:
the training context masks a [clean | noisy] sequence block-causally, the streaming context
(streamer/cache/kv_pool.py) attends over a session's KV cache slot. The model never knows
which one it runs under, so cached rollout and full forward share every line of maths.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

import kernels

from .config import DiTConfig


class AttentionContext(Protocol):
    def frame_positions(self) -> torch.Tensor:
        """(B, T) integer position of each input frame (RoPE time index)."""
        ...

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v (B, H, N, Dh), RoPE applied -> (B, H, N, Dh)."""
        ...

    def subset(self, rows: list[int]) -> AttentionContext:
        """The same context for the batch rows `rows` only."""
        ...


# runner(run_blocks, tokens, depth) -> tokens, where run_blocks(tokens, start, end, rows=None)
# runs blocks [start, end) on the batch rows `rows` (all rows when None).
BlockRunner = Callable[[Callable[..., torch.Tensor], torch.Tensor, int], torch.Tensor]


class RoPE3D(nn.Module):
    """Rotary embedding split over (time, row, column) channel groups of each head."""

    def __init__(self, head_dim: int, grid: int, max_frames: int, theta: float = 100.0):
        super().__init__()
        half = head_dim // 2
        t_pairs = half // 4  # a quarter of the rotation pairs for time, the rest shared by rows/cols
        s_pairs = (half - t_pairs) // 2
        t_pairs = half - 2 * s_pairs

        def freqs(n: int) -> torch.Tensor:
            return 1.0 / (theta ** (torch.arange(n, dtype=torch.float64) / n))

        rows = torch.arange(grid, dtype=torch.float64).repeat_interleave(grid)  # (P,)
        cols = torch.arange(grid, dtype=torch.float64).repeat(grid)
        spatial = torch.cat([rows[:, None] * freqs(s_pairs), cols[:, None] * freqs(s_pairs)], dim=-1)
        self.spatial: torch.Tensor
        self.time_freqs: torch.Tensor
        self.register_buffer("spatial", spatial.float(), persistent=False)  # (P, half - t_pairs)
        self.register_buffer("time_freqs", freqs(t_pairs).float(), persistent=False)  # (t_pairs,)
        self.tokens_per_frame = grid * grid

    def angles(self, frame_pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """frame_pos (B, T) -> cos, sin (B, 1, T*P, head_dim/2)."""
        b, t = frame_pos.shape
        p = self.tokens_per_frame
        temporal = frame_pos.float()[..., None] * self.time_freqs  # (B, T, t_pairs)
        temporal = temporal[:, :, None, :].expand(b, t, p, -1)
        spatial = self.spatial[None, None].expand(b, t, -1, -1)
        ang = torch.cat([temporal, spatial], dim=-1).reshape(b, 1, t * p, -1)
        return ang.cos(), ang.sin()

    def time_rotation(self, frames: float) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin (head_dim/2,) of a pure time shift by `frames` (used to re-index a cache)."""
        ang = torch.cat([frames * self.time_freqs, torch.zeros_like(self.spatial[0])])
        return ang.cos(), ang.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply RoPE in the split-halves layout. x (..., D), cos/sin broadcast to (..., D/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal features of flow time t in [0, 1] (scaled to [0, 1000]). t (...) -> (..., dim)."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
    args = 1000.0 * t.float()[..., None] * freqs
    return torch.cat([args.cos(), args.sin()], dim=-1)


class TextEncoder(nn.Module):
    """Prompt tokens -> contextual token features and a pooled vector (run once per prompt)."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.pos = nn.Parameter(torch.randn(cfg.max_tokens, cfg.dim) * 0.02)
        layer = nn.TransformerEncoderLayer(
            cfg.dim, cfg.heads, int(cfg.dim * cfg.mlp_ratio), dropout=0.0, batch_first=True, norm_first=True
        )
        self.layers = nn.TransformerEncoder(layer, cfg.text_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(cfg.dim)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (B, L) int64, padded with 0 to max_tokens -> features (B, L, D), pooled (B, D)."""
        h = self.norm(self.layers(self.embed(tokens) + self.pos[: tokens.shape[1]]))
        return h, h.mean(dim=1)


class Block(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        d, self.heads = cfg.dim, cfg.heads
        self.qkv = nn.Linear(d, 3 * d)
        self.q_norm = nn.RMSNorm(cfg.head_dim, eps=1e-6)
        self.k_norm = nn.RMSNorm(cfg.head_dim, eps=1e-6)
        self.proj = nn.Linear(d, d)
        self.norm_x = nn.LayerNorm(d, eps=1e-6)
        self.cross_q = nn.Linear(d, d)
        self.cross_kv = nn.Linear(d, 2 * d)  # applied to prompt features once per prompt
        self.cross_proj = nn.Linear(d, d)
        hidden = int(d * cfg.mlp_ratio)
        # Exact (erf) GELU: on this CPU the tanh approximation is ~3x slower (measured 170 vs 54 us
        # on a chunk's MLP activations) and it was 13% of a denoise step.
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Linear(hidden, d))
        self.ada = nn.Linear(d, 6 * d)
        nn.init.zeros_(self.ada.weight)
        nn.init.zeros_(self.ada.bias)
        self._compiled: tuple[Callable[..., tuple[torch.Tensor, ...]], Callable[..., torch.Tensor]] | None = None

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.heads, -1).transpose(1, 2)  # (B, H, N, Dh)

    def text_kv(self, text: torch.Tensor) -> torch.Tensor:
        """Prompt features (B, L, D) -> stacked cross-attention K/V (B, 2, H, L, Dh)."""
        k, v = self.cross_kv(text).chunk(2, dim=-1)
        return torch.stack([self.split_heads(k), self.split_heads(v)], dim=1)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, P, D)
        c: torch.Tensor,  # (B, T, D) per-frame conditioning
        text_kv: torch.Tensor,  # (B, T or 1, 2, H, L, Dh) per-frame (or shared) prompt K/V
        rope: tuple[torch.Tensor, torch.Tensor],
        ctx: AttentionContext,
        layer: int,
    ) -> torch.Tensor:
        # Two pure tensor functions around the context's attention: `compile_maths()` hands them to
        # torch.compile, while the attention (per-session cache lengths, Python-side slots) stays eager.
        before, after = self._compiled or (self.before_attention, self.after_attention)
        mods, q, k, v = before(x, c, *rope)
        return after(x, mods, ctx.attend(layer, q, k, v), text_kv)

    def compile_maths(self, mode: str = "default") -> None:
        """Compile the block's maths with torch.compile (inductor) in `mode`, shapes dynamic: one
        graph serves every batch size above 1 (size 1 gets its own). The first call of each graph
        compiles it. With "reduce-overhead" each graph is also recorded as a CUDA graph per batch
        size and block (their weights are the graphs' fixed inputs)."""
        self._compiled = (torch.compile(self.before_attention, dynamic=True, mode=mode),
                          torch.compile(self.after_attention, dynamic=True, mode=mode))

    def before_attention(
        self, x: torch.Tensor, c: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """-> the frames' adaLN modulations (B, T, 1, 6D) and q, k, v (B, H, T*P, Dh), RoPE applied."""
        b, t, p, d = x.shape
        mods = self.ada(F.silu(c))[:, :, None]  # (B, T, 1, 6D)
        h = kernels.modulate(x, mods[..., :d], mods[..., d : 2 * d])  # norm1 (no affine) + adaLN
        q, k, v = self.qkv(h.reshape(b, t * p, d)).view(b, t * p, 3, self.heads, -1).unbind(2)
        # Norms run on the contiguous (B, N, H, Dh) layout: on a transposed view the CPU
        # rms_norm falls off its fused kernel (measured 10x slower).
        q = rotate(self.q_norm(q).transpose(1, 2), cos, sin)
        k = rotate(self.k_norm(k).transpose(1, 2), cos, sin)
        return mods, q, k, v.transpose(1, 2)

    def after_attention(
        self, x: torch.Tensor, mods: torch.Tensor, att: torch.Tensor, text_kv: torch.Tensor
    ) -> torch.Tensor:
        """Self-attention's output projection, cross-attention to the prompt, then the MLP."""
        b, t, p, d = x.shape
        _, _, gate1, shift2, scale2, gate2 = mods.chunk(6, dim=-1)
        x = kernels.gated_residual(x, gate1, self.proj(att.transpose(1, 2).reshape(b, t, p, d)))

        # Cross-attention: each frame's tokens attend to the prompt that frame was made under.
        # When every frame shares one prompt (inference: text_kv has T == 1) all tokens of a
        # sample attend in one call; training clips switch prompts per chunk.
        cq = self.cross_q(self.norm_x(x))
        tt = text_kv.shape[1]
        cq = cq.reshape(b * tt, (t // tt) * p, self.heads, -1).transpose(1, 2)
        kv = text_kv.reshape(b * tt, *text_kv.shape[2:])
        cross = F.scaled_dot_product_attention(cq, kv[:, 0].contiguous(), kv[:, 1].contiguous())
        x = x + self.cross_proj(cross.transpose(1, 2).reshape(b, t, p, d))

        h = kernels.modulate(x, shift2, scale2)
        return kernels.gated_residual(x, gate2, self.mlp(h))


class CausalDiT(nn.Module):
    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.cfg = cfg
        d, pd = cfg.dim, cfg.latent_channels * cfg.patch**2
        self.text = TextEncoder(cfg)
        self.patch_in = nn.Linear(pd, d)
        self.time_mlp = nn.Sequential(nn.Linear(256, d), nn.SiLU(), nn.Linear(d, d))
        self.action_embed = nn.Embedding(cfg.num_actions, d)
        self.control_mlp = nn.Sequential(nn.Linear(cfg.control_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.pooled_proj = nn.Linear(d, d)
        self.rope = RoPE3D(cfg.head_dim, cfg.latent_size // cfg.patch, cfg.max_frames)
        self._blocks = [Block(cfg) for _ in range(cfg.depth)]
        self._cuda_graphs = False  # compile_blocks("reduce-overhead") records the maths as CUDA graphs
        self.blocks = nn.ModuleList(self._blocks)
        self.ada_out = nn.Linear(d, 2 * d)
        self.patch_out = nn.Linear(d, pd)
        for lin in (self.ada_out, self.patch_out):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)

    def compile_blocks(self, mode: str = "default") -> None:
        """torch.compile every block's maths (Block.compile_maths); for inference."""
        for blk in self.blocks_list():
            blk.compile_maths(mode)
        self._cuda_graphs = mode == "reduce-overhead"

    @property
    def compiled(self) -> bool:
        return any(blk._compiled is not None for blk in self.blocks_list())

    @property
    def records_cuda_graphs(self) -> bool:
        """compile_blocks("reduce-overhead"): each batch size's maths is recorded on its first calls."""
        return self._cuda_graphs

    def blocks_list(self) -> list[Block]:
        """The blocks, typed (ModuleList items are plain Modules to mypy)."""
        return self._blocks

    def encode_text(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """tokens (B, L) -> {"kv": (B, depth, 2, H, L, Dh), "pooled": (B, D)}: all a prompt costs."""
        feats, pooled = self.text(tokens)
        kv = torch.stack([blk.text_kv(feats) for blk in self.blocks_list()], dim=1)
        return {"kv": kv, "pooled": self.pooled_proj(pooled)}

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, C, h, w) -> (B, T, P, C*p*p)."""
        b, t, c, h, w = x.shape
        p = self.cfg.patch
        x = x.reshape(b, t, c, h // p, p, w // p, p).permute(0, 1, 3, 5, 2, 4, 6)
        return x.reshape(b, t, (h // p) * (w // p), c * p * p)

    def unpatchify(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _, _ = x.shape
        p, g, c = self.cfg.patch, self.cfg.latent_size // self.cfg.patch, self.cfg.latent_channels
        x = x.reshape(b, t, g, g, c, p, p).permute(0, 1, 4, 2, 5, 3, 6)
        return x.reshape(b, t, c, g * p, g * p)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, C, h, w) latents
        t: torch.Tensor,  # (B, T) flow time of each frame
        text: dict[str, torch.Tensor],  # {"kv": (B, T|1, depth, 2, H, L, Dh), "pooled": (B, T|1, D)}
        actions: torch.Tensor,  # (B, T) int64
        controls: torch.Tensor,  # (B, T, control_dim)
        ctx: AttentionContext,
        runner: BlockRunner | None = None,
    ) -> torch.Tensor:
        """Predict the flow velocity (noise - x0) of every input frame. -> (B, T, C, h, w).

        Velocity rather than x0 is the usual flow-matching target (SD3, Wan); callers get
        x0 = x - t * v. A `runner` (e.g. streamer/cache/step_cache.py) may decide per sample
        which blocks to run; by default every block runs on every sample.
        """
        if self._cuda_graphs:
            # One forward is one step of inductor's CUDA graph trees: without the mark, a graph's
            # outputs (a block's modulations, read by its second half) may count as overwritten
            # by the next replay, which is what the first GPU run of this mode raised. Nothing
            # a graph returns outlives the forward: the KV pool and the output are copies (step
            # reuse, which keeps block outputs across steps, runs on CPUs only).
            torch.compiler.cudagraph_mark_step_begin()
        tokens = self.patch_in(self.patchify(x))  # (B, T, P, D)
        c = (
            self.time_mlp(timestep_embedding(t, 256))
            + self.action_embed(actions)
            + self.control_mlp(controls)
            + text["pooled"]  # (B, T or 1, D)
        )
        # Contexts count positions on the host (cache lengths are Python ints); angles are made here.
        rope = self.rope.angles(ctx.frame_positions().to(x.device))
        blocks = self.blocks_list()

        def run(tok: torch.Tensor, start: int, end: int, rows: list[int] | None = None) -> torch.Tensor:
            """Blocks [start, end) on all samples, or on the batch rows `rows` only."""
            cc, kv, rp, cx = c, text["kv"], rope, ctx
            if rows is not None:
                idx = torch.tensor(rows, device=c.device)
                cc, kv = c[idx], kv[idx]
                rp, cx = (rope[0][idx], rope[1][idx]), ctx.subset(rows)
            for i in range(start, end):
                tok = blocks[i](tok, cc, kv[:, :, i], rp, cx, i)
            return tok

        tokens = run(tokens, 0, len(blocks)) if runner is None else runner(run, tokens, len(blocks))
        shift, scale = self.ada_out(F.silu(c))[:, :, None].chunk(2, dim=-1)
        out = self.patch_out(kernels.modulate(tokens, shift, scale))
        return self.unpatchify(out)
