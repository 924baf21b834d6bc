"""gatekeeper inside a LiteLLM proxy, as a pre-call hook.

LiteLLM's `config.yaml`:

    litellm_settings:
      callbacks: gatekeeper.adapters.litellm_hook.proxy_handler_instance

and `GATEKEEPER_CONFIG=/path/to/gatekeeper.yaml` in the proxy's environment. On every request
that carries tools, the hook resolves the tier of `data["model"]` (the model name the client
sent) at the request's effort and gates the tools with the codec of the call's protocol, the same
semantics as gatekeeper's own proxy:
  * `completion` / `acompletion` (`/chat/completions`): Chat Completions, effort `reasoning_effort`;
  * `responses` / `aresponses` (`/v1/responses`): the Responses API, effort `reasoning.effort`;
  * `anthropic_messages` / `aanthropic_messages` (`/v1/messages`): the Messages API, effort
    `output_config.effort` or the thinking budget's mapping.
Any other call type that carries a tool field (`tools`, `tool_choice`, `functions`, `mcp_servers`)
is refused with a 400: gatekeeper cannot tell how it carries tools, so it never passes ungated.

Answers are enforced as the proxy enforces them (LiteLLM's post-call hooks): a model may call a
tool it was never offered (a hallucination, or a prompt naming a hidden tool), so a call is kept
only for a tool the gated request offered under the same kind. A plain or streamed answer has such
a call removed (or explained, `blocked_calls`), the stream well-formed and finished; an answer the
hook cannot read is a 502, or a stream that ends with the protocol's error event.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

import orjson
import structlog
from litellm.integrations.custom_logger import CustomLogger

from gatekeeper import (
    PROTOCOLS,
    AnswerGate,
    AnswerInvalid,
    ConfigError,
    Gatekeeper,
    GatekeeperError,
    NotMeasured,
    RequestInvalid,
    StreamRelay,
    ToolChoiceBlocked,
    agate_call,
    tool_carriers,
    unlisted_fields,
)

# Named by its module, as every gatekeeper logger is (an adapter uses gatekeeper's public API
# only: structlog itself, not gatekeeper.observe.logs).
log = structlog.get_logger(__name__)

CONFIG_ENV = "GATEKEEPER_CONFIG"
# LiteLLM call type -> the protocol its requests speak (each protocol's `litellm_calls`).
_PROTOCOLS = {call: entry.name for entry in PROTOCOLS.values() for call in entry.litellm_calls}
# Fields that offer tools (or could: a stored prompt) in any protocol: what a call type
# gatekeeper does not gate is judged by.
_TOOL_FIELDS = tuple(
    dict.fromkeys(f for entry in PROTOCOLS.values() for f in (*entry.tool_fields, *entry.stored_tools))
)
# Request keys with which LiteLLM's router sends the call to other models when the asked one
# fails (a request's own lists replace the configured ones): the tools were gated for the asked
# model's tier only.
# `router_settings_override` carries the same lists (LiteLLM's proxy applies it from the request
# body), and `user_config` a router of the client's own, its model list and fallbacks (LiteLLM bans
# it from request bodies, unless its admin lets clients send credentials).
_REROUTING = (
    "fallbacks",
    "context_window_fallbacks",
    "content_policy_fallbacks",
    "router_settings_override",
    "user_config",
)


class GatekeeperHook(CustomLogger):  # type: ignore[misc]  # litellm is not type-checked (pyproject)
    """Removes from each chat request the tools its model's tier may not see.

    Built with a `Gatekeeper`, or lazily from the YAML file named by `$GATEKEEPER_CONFIG` on the
    first request (so importing this module needs no configuration).
    """

    def __init__(self, gk: Gatekeeper | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._gk = gk
        self._lock = threading.Lock()
        # Each gated request's answer side, until its answer comes back (by the request dict's
        # identity: LiteLLM hands the post-call hooks the dict the pre-call hook returned). A
        # call that fails never comes back, so the table is bounded: the oldest entry goes first,
        # and an answer whose entry is gone is judged as offered nothing (fail closed).
        self._answers: OrderedDict[int, tuple[Any, AnswerGate]] = OrderedDict()

    @property
    def gk(self) -> Gatekeeper:
        if self._gk is None:
            with self._lock:
                if self._gk is None:
                    path = os.environ.get(CONFIG_ENV)
                    if not path:
                        raise ConfigError(f"{CONFIG_ENV} is not set: point it at a gatekeeper YAML config")
                    self._gk = Gatekeeper.from_config(path)
                    log.info("litellm_hook_configured", config=path)
        return self._gk

    # LiteLLM calls this hook only if the class itself defines it: a subclass must define it again.
    async def async_pre_call_hook(
        self, user_api_key_dict: Any, cache: Any, data: dict[str, Any], call_type: str
    ) -> dict[str, Any]:
        protocol = _PROTOCOLS.get(str(getattr(call_type, "value", call_type)))
        # Tool fields, tool-carrying items and `extra_body` (LiteLLM merges it into the provider
        # request); a call type gatekeeper does not gate is judged by its tool fields alone.
        carried = [k for k in _TOOL_FIELDS if data.get(k) is not None]
        if protocol is not None:
            carried = list(dict.fromkeys(tool_carriers(protocol, data) + carried))
        if not carried:
            return data  # nothing to gate; and no measurement started for tool-less traffic
            # (its answer may carry no call: judged as offered nothing, post_call below)
        if protocol is None:
            raise _http_error(
                400,
                f"gatekeeper cannot gate the tools of LiteLLM call type {call_type!r} "
                f"(fields {', '.join(carried)}); it gates {', '.join(_PROTOCOLS)}",
                "call_type_not_gated",
            )
        model = data.get("model")
        if not isinstance(model, str) or not model:
            # Refused, not passed on: what LiteLLM makes of it (a list of models?) was never gated.
            raise _http_error(400, "'model' must be a non-empty string on a request with tools", "invalid_tools")
        rerouting = [k for k in _REROUTING if data.get(k)]
        if rerouting:
            raise _http_error(
                400,
                f"{', '.join(rerouting)} with tools refused: LiteLLM would send tools gated for {model[:256]!r} "
                "to another model, whose tier may not admit them",
                "fallbacks_not_gated",
            )
        try:
            # LiteLLM's own keys (its bookkeeping, its request options) are not request fields;
            # `extra_body` (which LiteLLM merges into the provider's request) is checked.
            # `metadata` is LiteLLM's too (its proxy fills it with the caller's key, headers,
            # ...: litellm_pre_call_utils.py `get_metadata_variable_name`), not the protocol's
            # map of strings. Any other key is a request field, checked like the proxy checks
            # it: LiteLLM sends every key it does not own on to the provider
            # (litellm/utils.py `add_provider_specific_params_to_optional_params`), so a
            # top-level `mcp_servers` on a chat call reached an Anthropic model ungated.
            foreign = {k for k in unlisted_fields(protocol, data) if _litellm_owned(k)} | {"metadata", "extra_body"}
            resolution, gated, answers = await agate_call(self.gk, protocol, data, foreign)
        except NotMeasured as exc:
            raise _http_error(503, str(exc), "model_not_measured") from None
        except RequestInvalid as exc:
            raise _http_error(400, str(exc), "invalid_tools") from None
        except ToolChoiceBlocked as exc:
            log.info("litellm_request_blocked", model=model, protocol=protocol, tier=exc.tier.value, tool=exc.tool)
            raise _http_error(400, str(exc), "tool_not_allowed") from None
        log.info(
            "litellm_request_gated",
            model=model,
            protocol=protocol,
            key=resolution.key,
            tier=resolution.tier.value,
            source=resolution.source,
            tools_kept=gated.kept,
            tools_hidden=gated.hidden,
        )
        token = _request_token(data)
        with self._lock:
            self._answers[id(token)] = (token, answers)
            while len(self._answers) > _PENDING_ANSWERS:
                self._answers.popitem(last=False)
        return data

    def _gate_of(self, data: Any) -> AnswerGate | None:
        """The answer side the pre-call hook left for the request `data` (None: it gated none)."""
        token = _request_token(data)
        with self._lock:
            entry = self._answers.pop(id(token), None)
        return entry[1] if entry is not None and entry[0] is token else None

    async def async_post_call_success_hook(self, data: dict[str, Any], user_api_key_dict: Any, response: Any) -> Any:
        # A gated request's answer is judged by the request's protocol, whatever LiteLLM's class
        # for it (as its stream is, below); another's only when it is a model answer.
        gate = self._gate_of(data)
        protocol = gate.codec.name if gate is not None else _answer_protocol(response)
        if protocol is None:
            return response  # embeddings, images, files, ...: no tool calls
        gate = gate or AnswerGate.of(self.gk, protocol)
        if isinstance(response, dict):
            doc = response
        elif hasattr(response, "model_dump"):
            doc = response.model_dump(mode="json")
        else:  # an answer the hook cannot read is not relayed unjudged
            raise _http_error(502, f"gatekeeper: cannot read a {type(response).__name__} answer", "upstream_invalid")
        try:
            enforced = gate.enforce(doc)
        except AnswerInvalid as exc:
            raise _http_error(502, f"gatekeeper: {exc}", "upstream_invalid") from None
        if not enforced.removed:
            return response
        log.info("litellm_calls_removed", protocol=protocol, calls=enforced.removed[:16])
        if isinstance(response, dict):
            return doc
        rebuilt = type(response)(**doc)
        for private in ("_hidden_params", "_response_headers"):  # what LiteLLM's proxy reads for its headers
            if hasattr(response, private):
                setattr(rebuilt, private, getattr(response, private))
        return rebuilt

    async def async_post_call_streaming_iterator_hook(
        self, user_api_key_dict: Any, response: Any, request_data: dict[str, Any]
    ) -> AsyncIterator[Any]:
        # A gated request's stream is enforced chunk by chunk whatever LiteLLM's class for a chunk
        # (the protocol is the request's); another's, from the first chunk that is a model answer.
        # A chunk that needs no change goes on as it is; one that does is replaced by the events
        # the client gets instead, as LiteLLM's own objects (its later hooks read them): a removed
        # call's events dropped and explained, the rest renumbered. An unreadable chunk ends the
        # stream with the protocol's error event, not an exception: LiteLLM cannot report one once
        # the response has started.
        gate = self._gate_of(request_data)
        relay: StreamRelay | None = gate.relay_stream() if gate is not None else None
        protocol = gate.codec.name if gate is not None else None
        reported = 0
        async for chunk in response:
            protocol = protocol or _answer_protocol(chunk)
            if protocol is None:
                yield chunk
                continue
            relay = relay or AnswerGate.of(self.gk, protocol).relay_stream()
            for out in _relayed(relay, protocol, chunk):
                yield out
            if len(relay.removed) > reported:
                log.info("litellm_calls_removed", protocol=protocol, calls=relay.removed[reported:][:16], stream=True)
                reported = len(relay.removed)
            if relay.failed:
                log.warning("litellm_stream_refused", protocol=protocol, reason="upstream_invalid")
                return  # the error event ended the stream; the rest of the answer is not relayed
        tail = relay.finish() if relay is not None else b""
        if tail:
            yield tail


def _relayed(relay: StreamRelay, protocol: str, chunk: Any) -> list[Any]:
    """What LiteLLM relays in place of `chunk`: the chunk itself, or the events that replace it
    (LiteLLM's objects of the protocol; SSE bytes for the Messages API, which it relays as bytes)."""
    if isinstance(chunk, (bytes, str)):
        out = relay.feed_bytes(chunk.encode() if isinstance(chunk, str) else chunk)
        return [out] if out else []
    doc = chunk.model_dump(mode="json", exclude_none=True) if hasattr(chunk, "model_dump") else chunk
    events = relay.feed_event(doc)
    if events is None:
        return [chunk]
    return [_litellm_event(protocol, event) for event in events]


def _litellm_event(protocol: str, doc: dict[str, Any]) -> Any:
    """An event as LiteLLM relays it for `protocol`: its own object, built as LiteLLM builds one
    from a provider's JSON; chat's error chunk as the SSE frame it relays as it is."""
    if protocol == "responses":
        from litellm.llms.openai.responses.transformation import OpenAIResponsesAPIConfig

        return OpenAIResponsesAPIConfig.get_event_model_class(str(doc.get("type")))(**doc)
    if "error" in doc:
        return b"data: " + orjson.dumps(doc) + b"\n\n"
    from litellm.types.utils import ModelResponseStream

    return ModelResponseStream(**doc)


_PENDING_ANSWERS = 10_000  # gated requests whose answer is awaited (each entry: the request and its gate)


def _request_token(data: dict[str, Any]) -> Any:
    """What ties a request's post-call hooks to its pre-call hook: LiteLLM's logging object for
    the call (one per request, made by LiteLLM's proxy, never by the client), else the request
    itself. Not the request dict: the Responses route hands the post-call hooks a shallow copy of
    it (every call of the answer was removed, the allowed ones too). Not `litellm_call_id`: a
    client chooses it (`x-litellm-call-id`), and two requests sharing one would swap gates."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    logging_obj = data.get("litellm_logging_obj")
    return logging_obj if isinstance(logging_obj, Logging) else data


def _answer_protocol(answer: Any) -> str | None:
    """The protocol of a LiteLLM answer or stream chunk (None: not a model answer with calls)."""
    from litellm.types.llms.openai import ResponsesAPIResponse, ResponsesAPIStreamingResponse
    from litellm.types.utils import ModelResponse, ModelResponseStream

    if isinstance(answer, (ModelResponse, ModelResponseStream)):
        return "chat"
    if isinstance(answer, ResponsesAPIResponse) or _is_responses_event(answer, ResponsesAPIStreamingResponse):
        return "responses"
    if isinstance(answer, (bytes, str)) or (isinstance(answer, dict) and answer.get("type") == "message"):
        return "messages"  # LiteLLM relays the Messages API as the provider's dict, or its SSE bytes
    return None


def _is_responses_event(answer: Any, union: Any) -> bool:
    from typing import get_args

    kinds = tuple(k for k in get_args(getattr(union, "__origin__", union)) or get_args(union) if isinstance(k, type))
    return bool(kinds) and isinstance(answer, kinds)


def _litellm_owned(key: str) -> bool:
    """A key LiteLLM keeps for itself (its own options and bookkeeping), never sent to the provider."""
    from litellm.types.utils import is_litellm_owned_kwarg

    return key in _PROXY_KEYS or bool(is_litellm_owned_kwarg(key))


# What LiteLLM's proxy adds to a request's data besides the kwargs litellm owns (its auth object).
_PROXY_KEYS = frozenset({"user_api_key_dict"})


def _http_error(status: int, message: str, code: str) -> Exception:
    """FastAPI's HTTPException (what LiteLLM's proxy turns into an OpenAI-shaped error with this status)."""
    try:
        from fastapi import HTTPException  # always present in a LiteLLM proxy; not a gatekeeper dependency
    except ImportError:
        return GatekeeperError(message)
    detail = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return HTTPException(status_code=status, detail=detail)


proxy_handler_instance = GatekeeperHook()
