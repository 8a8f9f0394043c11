"""Tiny random Wan configs (2 layers, small dims, tiny VAE and UMT5) for tests and plumbing.

Built from config objects, so nothing is downloaded; pixels are meaningless. `streamer serve
--model wan-causal --config tiny-random` serves `tiny_random()`. `wan_1_3b_configs()` gives the
real Wan2.1-T2V-1.3B shapes (for the GPU benchmark with random weights).
"""

from __future__ import annotations

import dataclasses

import torch
from diffusers import AutoencoderKLWan, WanTransformer3DModel

from .config import CausalConfig
from .loader import cast_for_inference, default_device_dtype
from .model import WanCausalModel
from .text import HashTokenizer, PromptEncoder

TINY_TRANSFORMER = dict(
    patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=4,
    text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, rope_max_seq_len=64,
)
TINY_VAE = dict(
    base_dim=4, z_dim=4, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True],
    latents_mean=[0.1, -0.2, 0.3, 0.0], latents_std=[1.5, 0.8, 1.2, 1.0],
)
TINY_TEXT = dict(
    vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4,
    relative_attention_num_buckets=8, relative_attention_max_distance=16,
)
TINY_CAUSAL = CausalConfig(height=32, width=48, text_len=16, sink_frames=3, window_frames=6)

# Wan2.1-T2V-1.3B (diffusers' Wan-AI/Wan2.1-T2V-1.3B-Diffusers configs) and UMT5-XXL's encoder.
WAN_1_3B_TRANSFORMER = dict(
    patch_size=(1, 2, 2), num_attention_heads=12, attention_head_dim=128, in_channels=16, out_channels=16,
    text_dim=4096, freq_dim=256, ffn_dim=8960, num_layers=30, cross_attn_norm=True,
    qk_norm="rms_norm_across_heads", eps=1e-6, rope_max_seq_len=1024,
)
WAN_2_1_VAE: dict = {}  # AutoencoderKLWan's defaults are the Wan 2.1 VAE
UMT5_XXL = dict(
    vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
    relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="gated-gelu",
)


def build_random(transformer: dict, vae: dict, text: dict, cfg: CausalConfig, device=None, dtype=None,
                 seed: int = 0) -> WanCausalModel:
    """A WanCausalModel with random weights, made directly on `device`."""
    from transformers import UMT5Config, UMT5EncoderModel

    dev, dt = default_device_dtype(device, dtype)
    torch.manual_seed(seed)
    with torch.device(dev):
        net = WanTransformer3DModel(**transformer)
        autoencoder = AutoencoderKLWan(**vae)
        encoder = UMT5EncoderModel(UMT5Config(**text))
    cast_for_inference(net, dt)
    encoder = PromptEncoder(encoder.to(dt), HashTokenizer(text["vocab_size"]), cfg.text_len)
    return WanCausalModel(net, cast_for_inference(autoencoder, dt), encoder, cfg)


def tiny_random(seed: int = 0, device=None, dtype=None, **causal) -> WanCausalModel:
    """The tiny random model; `causal` overrides CausalConfig fields (e.g. window_frames=3)."""
    cfg = dataclasses.replace(TINY_CAUSAL, **causal)
    return build_random(TINY_TRANSFORMER, TINY_VAE, TINY_TEXT, cfg, device or "cpu", dtype or torch.float32, seed)
