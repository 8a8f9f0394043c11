"""Prompt text -> UMT5 encoder states, the way Wan's pipeline makes them.

Tokens are padded to `text_len`, encoded with the attention mask, and the states past each
prompt's length are set to zero (Wan was trained on zero-padded 512-token contexts). A real
checkpoint brings its tokenizer in `tokenizer/`; tiny random configs use `HashTokenizer`, which
needs no files: words hash to ids, deterministically across processes.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

import torch

PAD_ID, EOS_ID = 0, 1  # T5's ids for padding and end of sequence


def clean(text: str) -> str:
    """Wan's prompt cleaning, less ftfy: collapse whitespace."""
    return re.sub(r"\s+", " ", text).strip()


class HashTokenizer:
    """Words -> crc32 % vocab ids, then EOS, then padding. For random-weight configs only."""

    def __init__(self, vocab_size: int):
        if vocab_size < 3:
            raise ValueError(f"vocab_size must be >= 3, got {vocab_size}")
        self.vocab_size = vocab_size

    def encode(self, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = torch.full((len(texts), max_length), PAD_ID, dtype=torch.int64)
        for row, text in enumerate(texts):
            words = re.findall(r"\w+|[^\w\s]", text.lower())
            toks = [2 + zlib.crc32(w.encode()) % (self.vocab_size - 2) for w in words][: max_length - 1]
            toks.append(EOS_ID)
            ids[row, : len(toks)] = torch.tensor(toks)
        return ids, (ids != PAD_ID).long()


def tokenize(tokenizer: Any, texts: list[str], max_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, mask) (B, max_length) from a HashTokenizer or a transformers tokenizer."""
    if isinstance(tokenizer, HashTokenizer):
        return tokenizer.encode(texts, max_length)
    enc = tokenizer(texts, padding="max_length", max_length=max_length, truncation=True,
                    add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
    return enc.input_ids, enc.attention_mask


class PromptEncoder:
    def __init__(self, encoder: torch.nn.Module, tokenizer: Any, text_len: int):
        self.encoder, self.tokenizer, self.text_len = encoder.eval(), tokenizer, text_len

    @torch.no_grad()
    def __call__(self, texts: list[str]) -> torch.Tensor:
        """texts -> (B, text_len, d_model) states, zero past each prompt's tokens."""
        ids, mask = tokenize(self.tokenizer, [clean(t) for t in texts], self.text_len)
        dev = next(self.encoder.parameters()).device
        ids, mask = ids.to(dev), mask.to(dev)
        states = self.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        return states * mask[..., None].to(states.dtype)
