"""What the three codecs share on the answer side, written once for plain answers and streams.

The rule: a call in an answer reaches the client only when it calls a tool the gated request
offered, under the same kind (each codec's `_Judge` says what its items call); every other call,
and every item of a type the codec does not know, is removed. What takes a removed call's place is
the operator's choice (`blocked_calls`, carried here by `Allowed.explain`):
  * `strip`: nothing (the answer may end up empty; some agent frameworks then raise);
  * `explain`: a short assistant text naming the tool and the tier it needs, so an agent loop
    gets an answer it can read and the model or the user can react.

The text names only what the model itself wrote (the called name, capped and reduced to plain
characters) and the tier rules the operator set; it never lists the tools that were hidden.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import orjson

from gatekeeper.errors import AnswerInvalid, RequestInvalid
from gatekeeper.protocols import schema as S
from gatekeeper.protocols.base import Allowed, Call, Codec, Enforced, Offered, Schema, may_carry_calls
from gatekeeper.protocols.gate import RequestGate, required_name
from gatekeeper.protocols.strict_json import loads
from gatekeeper.rules.tools import ToolId, ToolKind

_SHOWN_CHARS = 80  # a called name longer than this is shown cut (it comes from the model)


def enforce_answer(
    doc: Any, protocol: str, enforce_doc: Callable[[dict[str, Any], Allowed, Enforced], None], allow: Allowed
) -> Enforced:
    """A plain answer (a JSON object) with its calls to tools not offered removed in place by
    `enforce_doc`, and what was removed."""
    if not isinstance(doc, dict):
        raise AnswerInvalid(f"a {protocol} answer must be a JSON object, got {type(doc).__name__}")
    result = Enforced()
    enforce_doc(doc, allow, result)
    return result


def as_allowed(value: Allowed | Offered | Mapping[str, Schema | None]) -> Allowed:
    """What a codec's answer side works with. It also accepts a bare `Offered` (no tier: strip,
    exact identities only), or a plain mapping of function names to schemas (unit tests)."""
    if isinstance(value, Allowed):
        return value
    if isinstance(value, Offered):
        return Allowed(value)
    return Allowed(Offered((ToolId.function(name), schema) for name, schema in value.items()))


_JSON_FORMATS = frozenset({"json_schema", "json_object"})


def json_format(value: Any) -> bool:
    """Whether a request's answer-format object asks for JSON (`{"type": "json_schema" |
    "json_object", ...}`): what each codec's `asks_structured` reads, at its own field."""
    return isinstance(value, dict) and value.get("type") in _JSON_FORMATS


def explanation(allow: Allowed, name: str, tool: ToolId | None, arguments: str | None = None) -> str | None:
    """The assistant text that replaces a removed call to `name` (None under `strip`). `tool` is
    what the call calls, for the tier it needs (None: nothing the rules could name); `arguments`
    its argument text, for the tier argument rules give it (never shown)."""
    if not allow.explain:
        return None
    shown = shown_name(name)
    if allow.tier is None or allow.policy is None or tool is None:
        return f"[gatekeeper] A call to the tool `{shown}` was removed: this request did not offer it."
    required = allow.policy.required_tier(allow.gated_as(tool))
    if allow.tier.allows(required) and allow.admits(tool) and allow.policy.judges_arguments(allow.gated_as(tool)):
        needs = allow.policy.call_tier(allow.gated_as(tool), arguments)
        return (
            f"[gatekeeper] A call to the tool `{shown}` was removed: with these arguments it needs tier "
            f"{needs.value}, and this model has tier {allow.tier.value}."
        )
    if allow.tier.allows(required):
        return f"[gatekeeper] A call to the tool `{shown}` was removed: this request did not offer it."
    return (
        f"[gatekeeper] A call to the tool `{shown}` was removed: it needs tier {required.value}, "
        f"and this model has tier {allow.tier.value}."
    )


def shown_name(name: str) -> str:
    """A model-written name as it may appear in text: printable ASCII without backticks, capped."""
    cleaned = "".join(c if c.isascii() and c.isprintable() and c != "`" else "?" for c in name[: _SHOWN_CHARS + 1])
    if len(cleaned) > _SHOWN_CHARS:
        cleaned = cleaned[: _SHOWN_CHARS - 3] + "..."
    return cleaned or "(unnamed)"


def record(result: Enforced, call: Call) -> bool:
    """Note one call seen in an answer (kept or removed); True when it is kept."""
    result.calls.append(call)
    if not call.offered:
        result.removed.append(call.name)
    return call.offered


# An item -> the call it makes and the tool that call calls; True: it calls nothing (kept);
# False: it is removed without being a call (the output of a removed call).
Judge = Callable[[dict[str, Any]], "tuple[Call, ToolId | None] | bool"]
Replace = Callable[[dict[str, Any], int, str], dict[str, Any]]  # removed item, position, text -> its stand-in


def settle(verdict: tuple[Call, ToolId | None] | bool, result: Enforced, allow: Allowed) -> bool | str:
    """One item's fate, for plain answers and streams alike: True, it reaches the client as it is;
    a str, it is removed and this text stands in for it (`explain`); False, it is removed."""
    if verdict is True or verdict is False:
        return verdict
    call, tool = verdict
    if record(result, call):
        return True
    return explanation(allow, call.name, tool, call.arguments) or False


def enforce_items(
    items: Any, what: str, judge: Judge, result: Enforced, replace: Replace, allow: Allowed
) -> list[dict[str, Any]] | None:
    """A plain answer's item list (Responses `output`, Messages `content`) as the client may see
    it: calls the request did not offer removed, or replaced by `replace(item, position, text)`
    under `explain`. Returns None when nothing changed (the list is then left as it is)."""
    if not isinstance(items, list):
        raise AnswerInvalid(f"'{what}' must be an array, got {type(items).__name__}")
    kept: list[dict[str, Any]] = []
    changed = False
    for position, item in enumerate(items):
        if not isinstance(item, dict):
            raise AnswerInvalid(f"an item of '{what}' must be an object, got {type(item).__name__}")
        fate = settle(judge(item), result, allow)
        changed = changed or fate is not True
        if fate is True:
            kept.append(item)
        elif fate is not False:
            kept.append(replace(item, position, fate))
    return kept if changed else None


def admitted_listing(listed: Any, server: str, allow: Allowed, what: str) -> list[dict[str, Any]]:
    """An MCP server's tool listing in an answer (Responses `mcp_list_tools`, Messages
    `mcp_tool_listing`), cut to the tools the tier admits: the client shows the model this list."""
    if not isinstance(listed, list) or not all(isinstance(t, dict) for t in listed):
        raise AnswerInvalid(f"{what}'s 'tools' must be an array of objects")
    return [t for t in listed if isinstance(t.get("name"), str) and allow.admits(ToolId.mcp(server, t["name"]))]


def admitted_request_listing(
    tools: Any, label: str, entry_fields: S.Fields, where: str, g: RequestGate
) -> list[dict[str, Any]]:
    """The request-side twin of `admitted_listing`: an MCP listing that a request carries back
    (Responses `mcp_list_tools` in `input`, Messages `mcp_tool_listing`), each entry's fields
    checked, cut to the tools the tier admits on a server it admits."""
    if not isinstance(tools, list):
        raise RequestInvalid(f"{where}.tools must be an array")
    server = g.policy.allows(g.tier, g.server(label))
    kept = []
    for k, entry in enumerate(tools):
        if not isinstance(entry, dict):
            raise RequestInvalid(f"{where}.tools[{k}] must be an object")
        S.check(entry, entry_fields, f"{where}.tools[{k}]", g.unknown)
        name = required_name(entry.get("name"), f"{where}.tools[{k}].name")
        if server and g.policy.allows(g.tier, g.mcp(label, name)):
            kept.append(entry)
    return kept


class ItemJudge:
    """A `Judge` for the items of one answer (plain, or one stream): Responses output items,
    Messages content blocks. Remembers the calls it removed: the items answering them go too. A
    codec's subclass names its item types and says what a call item calls (`_call`)."""

    noun = "item"  # in errors: "an mcp_list_tools item", "a content block"
    not_calls: frozenset[str] = frozenset()  # item types that call nothing: kept
    answers: Mapping[str, str] = {}  # the type of an item answering a call -> its field naming the call
    listing = ""  # the type of an MCP server's tool listing, and its field naming the server
    listing_server = ""
    call_ids: tuple[str, ...] = ("id",)  # the fields of a call item that its answers name it by

    __slots__ = ("allow", "partial", "removed_ids")

    def __init__(self, allow: Allowed) -> None:
        self.allow = allow
        self.removed_ids: set[str] = set()
        # A stream's first event of a call: its arguments are not complete yet, so only the tool
        # is judged; the stream holds a call whose arguments decide (`Allowed.holds`) and judges
        # it again, whole, at its end.
        self.partial = False

    def admits(self, tool: ToolId, arguments: str | Mapping[str, Any] | None) -> bool:
        """Whether a call of `tool` with `arguments` is kept (only the tool, when `partial`)."""
        return self.allow.admits(tool) if self.partial else self.allow.admits_call(tool, arguments)

    def held(self, verdict: tuple[Call, ToolId | None] | bool) -> bool:
        """Whether a stream must hold the call `verdict` judged (on its tool alone) until its
        arguments are complete."""
        if verdict is True or verdict is False:
            return False
        call, tool = verdict
        return call.offered and tool is not None and self.allow.holds(tool)

    def __call__(self, item: dict[str, Any]) -> tuple[Call, ToolId | None] | bool:
        kind = item.get("type")
        if not isinstance(kind, str):
            raise AnswerInvalid(f"{self.noun} has no string 'type'")
        if kind in self.not_calls:
            return True
        answering = self.answers.get(kind)
        if answering is not None:
            answered = item.get(answering)
            return not (isinstance(answered, str) and answered in self.removed_ids)
        if kind == self.listing:
            return self._listing(item)
        call, tool = self._call(kind, item)
        if not call.offered:
            self.removed_ids.update(v for f in self.call_ids if isinstance(v := item.get(f), str))
        return call, tool

    def _call(self, kind: str, item: dict[str, Any]) -> tuple[Call, ToolId | None]:
        raise NotImplementedError

    def _listing(self, item: dict[str, Any]) -> tuple[Call, ToolId | None] | bool:
        """An MCP server's tool listing: kept for a server the request offered, listing only the
        tools the tier admits (the listing is what the client shows the model next)."""
        what = f"an {self.listing} {self.noun.split()[-1]}"
        server = item.get(self.listing_server)
        if not isinstance(server, str):
            raise AnswerInvalid(f"{what} has no string {self.listing_server!r}")
        if not offers_server(self.allow, server):
            return Call(f"{server}.*", None, False), ToolId.mcp(server, "*")
        if item.get("tools") is not None:
            item["tools"] = admitted_listing(item["tools"], server, self.allow, what)
        return True


def offers_server(allow: Allowed, server: str) -> bool:
    """Whether the request offered any tool of the MCP server `server`."""
    return any(t.kind is ToolKind.MCP and t.group == server for t in allow.offered.tools)


class Positions:
    """Where each upstream item of a stream (a Responses `output_index`, a Messages block `index`,
    a chat call's index) lands in the client's stream. Decided once, at the item's first event:
    an item that is shown gets the next client position (so the client's positions stay
    contiguous), a removed one gets None."""

    __slots__ = ("_at", "_next")

    def __init__(self) -> None:
        self._at: dict[Hashable, int | None] = {}
        self._next = 0

    def __contains__(self, key: Hashable) -> bool:
        return key in self._at

    def place(self, key: Hashable, shown: bool) -> int | None:
        if key in self._at:
            raise AnswerInvalid(f"stream item {key!r} was started twice")
        position = self._next if shown else None
        self._next += shown
        self._at[key] = position
        return position

    def __getitem__(self, key: Hashable) -> int | None:
        return self._at[key]


def enforce_plain(
    codec: Codec, raw: bytes, allowed: Allowed, translate: Callable[[dict[str, Any]], dict[str, Any]] | None = None
) -> tuple[bytes, Enforced | None]:
    """A plain answer as the client may read it, for every front end (the proxy's exchange, the
    in-process transport): the upstream's own bytes when they cannot spell a call (enforced
    None: the fast path), else parsed strictly, translated (`translate`: a chat answer to the
    client's protocol), enforced by the codec and re-serialised."""
    if translate is None and not may_carry_calls(raw, codec.markers, codec.plain_types):
        return raw, None
    doc = loads(raw, "upstream answer")
    if translate is not None:
        if not isinstance(doc, dict):
            raise AnswerInvalid("upstream answer must be a JSON object")
        doc = translate(doc)
    enforced = codec.enforce(doc, allowed)
    enforced.doc = doc
    try:
        return orjson.dumps(doc), enforced
    except orjson.JSONEncodeError as exc:  # nested deeper than orjson writes (254 levels)
        raise AnswerInvalid(f"upstream answer cannot be relayed: {exc}") from None
