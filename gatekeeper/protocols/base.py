"""What every client protocol codec provides. One codec per protocol (chat, responses,
messages); the request pipeline (proxy, in-process wrappers, LiteLLM hook) only talks to this.

A codec is pure: no I/O. It knows how its requests carry tools, tool choice and effort, how its
answers carry tool calls (plain and streamed) and how its errors look.

Contract that every codec keeps (the security principle of the project):
  * an answer the codec cannot read with certainty raises `AnswerInvalid`; it never reaches the
    client with a tool call in it;
  * a request field that could carry tools or redirect the upstream is understood and gated,
    or refused with `RequestInvalid`.

The pipeline, for one request (gatekeeper/server/pipeline.py):
    body -> codec.parse -> resolve the tier -> codec.gate -> codec.offered
         -> [client protocol not native upstream: translator.to_chat(body)]
         -> upstream -> [translator.from_chat(doc) | translator.stream_from_chat()]
         -> codec.enforce(doc) | codec.stream_filter(offered).feed(event) -> client

Fast path: a plain answer whose bytes `may_carry_calls` says cannot spell a call (checked with
the codec's `markers`) is relayed as the upstream's own bytes, unparsed. Anything else is parsed
strictly (orjson: no NaN, valid UTF-8 only), enforced and re-serialised, so an escaped key such
as "tool\\u005fcalls" reaches the client spelled plainly, after enforcement.

Translation (for upstreams that speak only Chat Completions; `upstream.protocols`): a protocol's
registry entry carries a `Translator` next to its codec (`register_protocol(ClientProtocol(...,
translator=...))`, protocols/table.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from gatekeeper.errors import AnswerInvalid, RequestInvalid  # noqa: F401  (raised by codecs)
from gatekeeper.protocols.gate import Gated
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolKind, ToolPolicy


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
    offered: bool  # was this name among the tools the request offered after gating?
    text: bool = False  # written as text in the answer's content, not made (drift/text_call.py)


@dataclass
class Enforced:
    """The outcome of enforcing one answer (plain) or one stream (accumulated)."""

    removed: list[str] = field(default_factory=list)  # names of calls removed
    calls: list[Call] = field(default_factory=list)  # every call seen, kept or removed
    # A plain answer's document as the client reads it (what enforce_plain serialised): its text
    # is read from it, not parsed again (None for a stream).
    doc: Any = field(default=None, compare=False, repr=False)


class Event(NamedTuple):
    """One server-sent event, as the SSE specification defines it (protocols/sse.py reads and writes them). A named
    tuple: built for every event of every stream, it must be cheap."""

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
        """Events to send at the end of the upstream stream (possibly none). Raises
        AnswerInvalid when the stream ended before its protocol's end marker (chat: [DONE])."""

    def error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends this stream in error (the codec's `stream_error`, numbered as
        this stream's next event where the protocol numbers them)."""


Schema = dict[str, Any]
_ABSENT = object()


class Offered(Mapping[str, "Schema | None"]):
    """The tools a gated request offers, read by the answer side.

    `tools`: each tool's exact typed identity, what answer enforcement matches a call against (a
    `computer_call` needs a `computer` built-in, never a function whose name starts alike).
    As a mapping: name (`str(ToolId)`) -> the JSON Schema of the tool's arguments (None when it
    has none), what the drift tracker validates a kept call's arguments with. A tool of an MCP
    server offered whole (`server.*`) is found by its own name too (schema None), though not
    listed: whether the tier admits it is the answer side's decision (`Allowed.admits`).
    """

    __slots__ = ("_schemas", "tools")

    def __init__(self, tools: Iterable[tuple[ToolId, Schema | None]] = ()) -> None:
        pairs = list(tools)
        self.tools = frozenset(tool for tool, _ in pairs)
        self._schemas = {str(tool): schema for tool, schema in pairs}

    def __getitem__(self, name: str) -> Schema | None:
        found = self._schemas.get(name, _ABSENT)
        if found is _ABSENT:
            group, dot, _ = name.partition(".")
            if not dot or ToolId.mcp(group, "*") not in self.tools:
                raise KeyError(name)
            return None
        return found  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        return iter(self._schemas)

    def __len__(self) -> int:
        return len(self._schemas)

    def __repr__(self) -> str:
        return f"Offered({sorted(map(repr, self.tools))})"


@dataclass(frozen=True)
class Allowed:
    """What the client of one request may receive in its answer (the pipeline builds one per
    request; a codec also accepts a bare `Offered`: no tier, strip).

    `offered`: the tools the gated request offers; `tier` and `policy`: the request's tier and
    tool rules, which decide the tools of an MCP server offered whole (rule name
    `<server_label>.<tool>`) and the text of an explanation; `explain`: a removed call is replaced
    by a short assistant text (`blocked_calls: explain`), else removed with nothing in its place.
    `servers`: a client's MCP server label -> the label whose rules gate it, where they differ
    (`Gated.servers`: a server bound by its URL, offered under another label).
    `structured`: the request asked for a structured answer (a JSON format, what an SDK's
    `parse` validates its text with): an explanation then goes where no parser reads it (chat's
    `refusal`, a Responses `refusal` part) or, where the protocol has no such place (Messages),
    is left out; the text stays JSON (`Codec.asks_structured`).
    """

    offered: Offered
    tier: Tier | None = None
    policy: ToolPolicy | None = None
    explain: bool = False
    servers: Mapping[str, str] = field(default_factory=dict)
    structured: bool = False

    def gated_as(self, tool: ToolId) -> ToolId:
        """The identity the rules judge `tool` by: an MCP tool under its server's bound label."""
        group = tool.group
        if tool.kind is not ToolKind.MCP or group is None or group not in self.servers:
            return tool
        return ToolId.mcp(self.servers[group], tool.name.partition(".")[2])

    def admits(self, tool: ToolId) -> bool:
        """Whether a call to `tool` may reach the client: offered exactly, or a tool of an MCP
        server offered whole (`server.*`) that the tier's rules admit. Fails closed: without a
        tier, a whole server admits none of its tools."""
        if tool in self.offered.tools:
            return True
        if tool.kind is not ToolKind.MCP or tool.group is None:
            return False
        whole = ToolId.mcp(tool.group, "*")
        return (
            whole in self.offered.tools
            and self.tier is not None
            and self.policy is not None
            and self.policy.allows(self.tier, self.gated_as(tool))
        )

    def admits_call(self, tool: ToolId, arguments: str | Mapping[str, Any] | None) -> bool:
        """Whether this one call may reach the client: `admits(tool)`, and the tier its
        arguments need (`tools.arguments`) is within the request's tier. Arguments are JSON text
        or an object (None: none that can be read, which rules judge at their strictest)."""
        if not self.admits(tool):
            return False
        if self.tier is None or self.policy is None or not self.policy.judges_arguments(self.gated_as(tool)):
            return True
        return self.tier.allows(self.policy.call_tier(self.gated_as(tool), arguments))

    def holds(self, tool: ToolId) -> bool:
        """Whether a streamed call of `tool` must be held until its arguments are complete: what
        it needs depends on them."""
        return self.policy is not None and self.tier is not None and self.policy.judges_arguments(self.gated_as(tool))


class Codec(Protocol):
    name: str  # "chat" | "responses" | "messages"
    upstream_path: str  # appended to upstream.base_url: "/chat/completions", ...; a token count codec's: its path
    markers: tuple[bytes, ...]  # byte strings without which an answer cannot carry a call
    plain_types: frozenset[bytes] | None  # item types an answer relayed unparsed may hold (None: any)

    def parse(self, body: dict[str, Any]) -> RequestInfo:
        """Model, effort and stream flag; raises RequestInvalid naming the bad field."""

    def gate(self, body: dict[str, Any], tier: Tier, policy: ToolPolicy) -> Gated:
        """Remove (in place) every tool above `tier`; raises RequestInvalid / ToolChoiceBlocked."""

    def offered(self, body: dict[str, Any]) -> Offered:
        """Tools a gated body offers: name -> JSON Schema of its arguments (None when it has none)."""

    def enforce(self, doc: Any, offered: Allowed | Offered) -> Enforced:
        """Remove (in place) calls to tools that were not offered from a plain answer.
        Raises AnswerInvalid when `doc` is not a well-formed answer of this protocol."""

    def stream_filter(self, offered: Allowed | Offered) -> StreamFilter: ...

    def asks_structured(self, body: dict[str, Any]) -> bool:
        """Whether the request asks for its answer's text in a JSON format (`Allowed.structured`)."""

    def listed_tool(self, tool: dict[str, Any], where: str) -> ToolId | None:
        """The identity of one tool of a flat list (`filter_tools`, the `gated` wrappers) when it
        is in this protocol's shape; None when it is not (protocols/table.py `listed_tool_id`
        asks each codec in turn). Raises RequestInvalid for its shape with a bad name."""

    def error_body(self, status: int, message: str, kind: str, code: str | None) -> dict[str, Any]:
        """The protocol's error shape (a plain answer's body)."""

    def stream_error(self, message: str, kind: str, code: str | None) -> Event:
        """The event that ends a stream in error, in the protocol's shape."""


class StreamConverter(Protocol):
    """Turns a chat stream's events into the client protocol's events (one per stream)."""

    def feed(self, event: Event) -> list[Event]:
        """Client-protocol events for one chat event. Raises AnswerInvalid when unreadable."""

    def finish(self) -> list[Event]:
        """Closing events. Raises AnswerInvalid when the chat stream ended before [DONE]."""


class Translator(Protocol):
    """Chat Completions bridge for one client protocol (registered with its codec).

    Names agreed between the pipeline and the protocol modules:
      * `to_chat(body)`: the GATED client request -> a chat request body (same model name; the
        pipeline sends it to the chat codec's `upstream_path`). Raises RequestInvalid for what cannot be
        expressed in chat (never drops a tool-carrying field silently: what it leaves out,
        `untranslated` names);
      * `from_chat(doc, request)`: a plain chat answer (already a dict) -> the client protocol's
        answer (`request` is the gated client body, for fields the answer echoes); the pipeline
        then runs the client codec's `enforce` on the result;
      * `stream_from_chat(request)`: a fresh StreamConverter for one streamed answer; the
        pipeline runs the client codec's stream filter on what it yields;
      * `untranslated(body) -> list[str]`: the tools of the gated body that `to_chat` left out
        (built-ins a chat model cannot call), for the pipeline's log; by default none;
      * `count_tokens(body) -> dict | None`: a local answer to the protocol's token count
        endpoint when the upstream does not speak the protocol; by default None (no local count:
        that route answers 404).

    A translator subclasses this protocol to inherit those two defaults.
    """

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def from_chat(self, doc: dict[str, Any], request: dict[str, Any] | None = None) -> dict[str, Any]: ...

    def stream_from_chat(self, request: dict[str, Any] | None = None) -> StreamConverter: ...

    def untranslated(self, body: dict[str, Any]) -> list[str]:
        """The tools of the gated `body` that `to_chat` leaves out (none by default)."""
        return []

    def count_tokens(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """A local token count for `body` (None by default: this translator cannot count)."""
        return None


def may_carry_calls(raw: bytes | str, markers: tuple[bytes, ...], plain_types: frozenset[bytes] | None = None) -> bool:
    """False only when no JSON reader could find a tool call in `raw`: none of the codec's
    markers appears, no `\\u` escape could spell one, and no NUL byte hints at UTF-16/32 (which
    Python's json.loads(bytes) decodes on its own). With `plain_types` (a codec whose answers are
    lists of typed items), also only when every `"type"` value is one of them: an item of any
    other type (an MCP listing, a type the codec does not know) must reach the codec to be cut
    or removed. A `"type"` spelled inside a string's text only costs a parse."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    if b"\\u" in raw or b"\x00" in raw or any(m in raw for m in markers):
        return True
    if plain_types is None:
        return False
    return any(m[1] is None or m[1] not in plain_types for m in _TYPE_VALUE.finditer(raw))


# A `"type"` key and its value when it is a string (escapes kept as written: never a plain type).
_TYPE_VALUE = re.compile(rb'"type"\s*:\s*(?:"((?:[^"\\]|\\.)*)")?')
