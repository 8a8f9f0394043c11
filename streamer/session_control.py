"""Control messages -> session changes, with an error naming the field for anything invalid."""

from __future__ import annotations

from typing import Any

from scheduler.base import SchedulerBase

from .events import ControlError
from .prompt_cache import PromptCache
from .protocol import (
    ActionMessage,
    ControlMessage,
    ControlValuesMessage,
    PauseMessage,
    PromptMessage,
    ResumeMessage,
    SeedMessage,
)
from .session import Session, SessionState

ACTION_NAMES = ("none", "left", "right", "up", "down")  # action id = index (the protocol's order)
# message type -> (the state a session must be in, the state it moves to); the scheduler
# method of the same name as the message type pauses or resumes its clock.
PAUSE_RESUME = {
    "pause": (SessionState.STREAMING, SessionState.PAUSED),
    "resume": (SessionState.PAUSED, SessionState.STREAMING),
}


def apply_control(session: Session, msg: ControlMessage, prompts: PromptCache, scheduler: SchedulerBase,
                  now: float) -> dict[str, Any]:
    if isinstance(msg, PromptMessage):
        cond = prompts.get(msg.prompt)
        first = session.redirect(cond, msg.transition)
        return {"type": "prompt", "unknown_words": cond.unknown_words, "applies_from_chunk": first}
    if isinstance(msg, ActionMessage):
        action = ACTION_NAMES.index(msg.action)
        if action >= session.spec.num_actions:
            raise ControlError("action", f"this model takes {session.spec.num_actions} actions")
        session.set_action(action)
        return {"type": "action", "applies_from_chunk": session.next_chunk_index()}
    if isinstance(msg, ControlValuesMessage):
        if session.spec.control_dim < 2:
            raise ControlError("type", "this model takes no control values", "unsupported")
        session.set_controls(msg.mouth, msg.eyes)
        return {"type": "control", "applies_from_chunk": session.next_chunk_index()}
    if isinstance(msg, SeedMessage):
        session.reseed(msg.seed)
        return {"type": "seed", "applies_from_chunk": session.next_chunk_index()}
    if isinstance(msg, PauseMessage | ResumeMessage):
        before, after = PAUSE_RESUME[msg.type]
        if session.state is not before:
            raise ControlError("type", f"cannot {msg.type} a session that is {session.state.value}", "invalid_state")
        session.transition(after)
        getattr(scheduler, msg.type)(session.id, now)
        return {"type": msg.type}
    raise ControlError("type", f"'{getattr(msg, 'type', '?')}' is not an engine control message", "unknown_type")
