"""What every client protocol codec provides. One codec per protocol (chat, responses,
messages); the request pipeline (proxy, in-process wrappers, LiteLLM hook) only talks to this.

A codec is pure: no I/O. It knows how its requests carry tools, tool choice and effort, how its
answers carry tool calls (plain and streamed) and how its errors look. Translation to and from
Chat Completions (for upstreams that speak only chat) lives in `translate.py` per protocol.

Contract that every codec keeps (the security principle of the project):
  * an answer the codec cannot read with certainty raises `AnswerInvalid`; it never passes raw;
  * a request field that could carry tools or redirect the upstream is understood and gated,
    or refused with `RequestInvalid`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from gatekeeper.gating import Gated, ToolPolicy
from gatekeeper.errors import AnswerInvalid, RequestInvalid  # noqa: F401  (raised by codecs)
from gatekeeper.tiers import Tier


@dataclass(frozen=True)
class RequestInfo:
    """What the pipeline needs from a parsed request body before gating."""

    model: str
    effort: str | None  # None = the client sent no effort: the `default` level
    stream: bool


@dataclass(frozen=True)
class Call:
    """One tool call seen in an answer (before enforcement), for the drift tracker."""

    name: str
    arguments: str | None  # the raw argument text as sent; None when the protocol sends objects
    offered: bool          # was this name among the tools the request offered after gating?


@dataclass
class Enforced:
    """The outcome of enforcing one answer (plain) or one stream (accumulated)."""

    removed: list[str] = field(default_factory=list)  # names of calls removed
    calls: list[Call] = field(default_factory=list)   # every call seen, kept or removed


@dataclass(frozen=True)
class Event:
    """One server-sent event, as the SSE specification defines it."""

    data: str
    event: str | None = None
    id: str | None = None
    retry: int | None = None


class StreamFilter(Protocol):
    """Per-stream state: fed each parsed upstream event in order, returns what the client gets."""

    result: Enforced

    def feed(self, event: Event) -> list[Event]:
        """Events to send for this one (possibly none). Raises AnswerInvalid when unreadable."""

    def finish(self) -> list[Event]:
        """Events to send at the end of the upstream stream (possibly none)."""


class Codec(Protocol):
    name: str            # "chat" | "responses" | "messages"
    upstream_path: str   # appended to upstream.base_url: "/chat/completions", "/responses", "/messages"

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        """Model, effort and stream flag; raises RequestInvalid naming the bad field."""

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        """Remove (in place) every tool above `tier`; raises RequestInvalid / ToolChoiceBlocked."""

    def offered(self, body: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
        """Tools a gated body offers: name -> JSON Schema of its arguments (None when it has none)."""

    def enforce(self, doc: Any, offered: dict[str, dict[str, Any] | None]) -> Enforced:
        """Remove (in place) calls to tools that were not offered from a plain answer."""

    def stream_filter(self, offered: dict[str, dict[str, Any] | None]) -> StreamFilter: ...

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        """The protocol's error shape."""
