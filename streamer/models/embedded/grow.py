"""Growing a trained model's parts, each warm-started so that training goes on from what it knew.

- `grown_decoder`: a deeper decoder (more residual blocks, a finer stage) that keeps every old
  weight whose name and shape it shares; the added layers start from scratch and are trained by
  a decoder fine-tune (train.py, `--decoder-steps` with the `--dec-*` flags).
- `grown_dit`: a deeper DiT whose added blocks start as the identity, so the grown model predicts
  exactly what the old one did and its training starts at the old one's quality (`--grow-depth`).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .autoencoder import Autoencoder
from .dit import CausalDiT
from .model import EmbeddedModel


def grown_decoder(model: EmbeddedModel, arch: dict[str, int]) -> EmbeddedModel:
    """`model` with a decoder of the config fields `arch`, warm-started from the old decoder."""
    ae_cfg = dataclasses.replace(model.cfg.autoencoder, **arch)
    ae = Autoencoder(ae_cfg)
    ae.encoder.load_state_dict(model.ae.encoder.state_dict())
    old, new = model.ae.decoder.state_dict(), ae.decoder.state_dict()
    new.update({k: v for k, v in old.items() if k in new and new[k].shape == v.shape})
    ae.decoder.load_state_dict(new)
    return EmbeddedModel(dataclasses.replace(model.cfg, autoencoder=ae_cfg), ae=ae, dit=model.dit)


def old_block_places(old: int, new: int) -> list[int]:
    """Where each of `old` blocks sits among `new`: the added blocks spread evenly between them
    (8 -> 12: one after every second old block), so every stage of the network gets depth, not
    only its end."""
    if new < old:
        raise ValueError(f"a DiT of {old} blocks cannot grow to {new}")
    return [i + i * (new - old) // old for i in range(old)]


def grown_dit(model: EmbeddedModel, depth: int, seed: int = 0) -> EmbeddedModel:
    """`model` with a DiT of `depth` blocks: the old blocks keep their weights, the added ones
    start from the usual initialisation (seeded) with their adaLN-Zero modulation and their
    cross-attention output at zero, which makes each of them the identity. (adaLN-Zero gates the
    self-attention and the MLP; the cross-attention's residual is not gated, hence its zeros.)
    Gradients still reach both zeroed layers through the nonzero rest, so the blocks train."""
    cfg = dataclasses.replace(model.cfg, dit=dataclasses.replace(model.cfg.dit, depth=depth))
    old_dit = model.dit
    places = old_block_places(old_dit.cfg.depth, depth)
    torch.manual_seed(seed)
    dit = CausalDiT(cfg.dit)
    state = {k: v for k, v in old_dit.state_dict().items() if not k.startswith("blocks.")}
    for i, j in enumerate(places):
        state.update({f"blocks.{j}.{k}": v for k, v in old_dit.blocks[i].state_dict().items()})
    for j in sorted(set(range(depth)) - set(places)):
        blk = dit.blocks_list()[j]
        for lin in (blk.ada, blk.cross_proj):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
        state.update({f"blocks.{j}.{k}": v for k, v in blk.state_dict().items()})
    dit.load_state_dict(state)
    return EmbeddedModel(cfg, ae=model.ae, dit=dit)
