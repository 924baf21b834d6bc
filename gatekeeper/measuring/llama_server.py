"""`python -m llama_cpp.server`, its tool calls bounded by the request's `max_tokens`.

llama-cpp-python's `chatml-function-calling` handler writes a tool call's name and arguments with
`max_tokens=None` (each `create_completion` of its tool branch, `llama_chat_format.py`), whatever
the request asked: a call the model never closes runs to the end of the context, minutes on two
cores, and llama.cpp keeps generating after the client gave up, so every later call queues behind
it. Run as `python -m gatekeeper.measuring.llama_server <llama_cpp.server arguments>`, the handler
passes the request's `max_tokens` on to those completions; nothing else changes (a request
without `max_tokens` runs as before, and so does a streamed tool call, whose completions run after
the handler has returned).
"""

from __future__ import annotations

import contextvars
import functools
from typing import Any

from llama_cpp import llama_chat_format
from llama_cpp.llama import Llama
from llama_cpp.server.__main__ import main

HANDLER = "chatml-function-calling"

_asked: contextvars.ContextVar[int | None] = contextvars.ContextVar("max_tokens_asked", default=None)


def _remembering(handler: Any) -> Any:
    """`handler` with the request's `max_tokens` kept for the completions it makes."""

    @functools.wraps(handler)
    def handle(*args: Any, max_tokens: int | None = None, **kwargs: Any) -> Any:
        token = _asked.set(max_tokens)
        try:
            return handler(*args, max_tokens=max_tokens, **kwargs)
        finally:
            _asked.reset(token)

    return handle


def _bounded(create_completion: Any) -> Any:
    """`Llama.create_completion` where an unbounded call inside the handler gets the request's bound."""

    @functools.wraps(create_completion)
    def create(self: Llama, *args: Any, **kwargs: Any) -> Any:
        if "max_tokens" in kwargs and kwargs["max_tokens"] is None:
            kwargs["max_tokens"] = _asked.get()
        return create_completion(self, *args, **kwargs)

    return create


def install() -> None:
    registry = llama_chat_format.LlamaChatCompletionHandlerRegistry()
    handler = registry.get_chat_completion_handler_by_name(HANDLER)
    registry.register_chat_completion_handler(HANDLER, _remembering(handler), overwrite=True)
    Llama.create_completion = _bounded(Llama.create_completion)


if __name__ == "__main__":
    install()
    main()
