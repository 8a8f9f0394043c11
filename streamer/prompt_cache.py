"""Prompt conditioning computed once per distinct prompt and shared by every session using it."""

from __future__ import annotations

from collections import OrderedDict

from .models.base import CausalVideoModel, PromptCond


class PromptCache:
    def __init__(self, model: CausalVideoModel, capacity: int = 256):
        self.model, self.capacity = model, capacity
        self._entries: OrderedDict[str, PromptCond] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, text: str) -> PromptCond:
        cond = self._entries.get(text)
        if cond is not None:
            self.hits += 1
            self._entries.move_to_end(text)
            return cond
        self.misses += 1
        cond = self.model.encode_prompt([text])[0]
        self._entries[text] = cond
        if len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return cond
