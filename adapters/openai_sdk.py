"""Gate an `openai.OpenAI` / `openai.AsyncOpenAI` client in-process, without the proxy.

    client = gate_client(openai.OpenAI(base_url=...), gk)
    client.chat.completions.create(model="m", messages=[...], tools=TOOLS, reasoning_effort="low")

`chat.completions.create`, `parse` and `stream` (also through `with_raw_response`,
`with_streaming_response` and `with_options`) get the proxy's semantics: the tools above the
model's tier are removed, `tools`/`tool_choice` are dropped when none remain, and a `tool_choice`
forcing a hidden tool raises `gatekeeper.gating.ToolChoiceBlocked`. A call without tools is
passed on untouched (and starts no measurement). Everything else is the client's own.
"""

from __future__ import annotations

from typing import Any, Callable

import openai

from gatekeeper.core import Gatekeeper

_TOOL_FIELDS = ("tools", "tool_choice", "functions", "function_call")
_GATED_CALLS = ("create", "parse", "stream")


def gate_client(client: openai.OpenAI | openai.AsyncOpenAI, gk: Gatekeeper) -> Any:
    """Return `client` with its chat completions gated by `gk`; the original client is unchanged."""
    return _Client(client, gk, isinstance(client, openai.AsyncOpenAI))


class _Delegate:
    def __init__(self, target: Any, gk: Gatekeeper, is_async: bool, streaming: bool = False) -> None:
        # streaming: reached through with_streaming_response, whose async calls open a context.
        self._target, self._gk, self._async, self._streaming = target, gk, is_async, streaming

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)

    def __repr__(self) -> str:
        return f"<gated {self._target!r}>"


class _Client(_Delegate):
    @property
    def chat(self) -> _Chat:
        return _Chat(self._target.chat, self._gk, self._async, self._streaming)

    @property
    def with_raw_response(self) -> _Client:
        return _Client(self._target.with_raw_response, self._gk, self._async)

    @property
    def with_streaming_response(self) -> _Client:
        return _Client(self._target.with_streaming_response, self._gk, self._async, streaming=True)

    def with_options(self, **options: Any) -> _Client:
        return _Client(self._target.with_options(**options), self._gk, self._async)

    copy = with_options


class _Chat(_Delegate):
    @property
    def completions(self) -> _Completions:
        return _Completions(self._target.completions, self._gk, self._async, self._streaming)


class _Completions(_Delegate):
    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name in ("with_raw_response", "with_streaming_response"):
            return _Completions(attr, self._gk, self._async, name == "with_streaming_response")
        if name not in _GATED_CALLS:
            return attr
        if not self._async:
            return lambda **kwargs: attr(**_gated_sync(self._gk, kwargs))
        if name == "stream" or self._streaming:
            # These return an async context manager, not a coroutine: gate when it is entered.
            return lambda **kwargs: _GatedAsyncContext(attr, kwargs, self._gk)

        async def call(**kwargs: Any) -> Any:
            return await attr(**await _gated_async(self._gk, kwargs))
        return call


class _GatedAsyncContext:
    def __init__(self, open_: Callable[..., Any], kwargs: dict, gk: Gatekeeper) -> None:
        self._open, self._kwargs, self._gk = open_, kwargs, gk
        self._manager: Any = None

    async def __aenter__(self) -> Any:
        self._manager = self._open(**await _gated_async(self._gk, self._kwargs))
        return await self._manager.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._manager.__aexit__(*exc)


def _tool_body(kwargs: dict) -> dict | None:
    """The call's keyword arguments with the SDK's omitted markers removed; None when it has no tools."""
    body = {k: v for k, v in kwargs.items() if not (k in _TOOL_FIELDS and _omitted(v))}
    if not body.get("tools") and not body.get("functions"):
        return None
    for field in ("tools", "functions"):
        if field in body and not isinstance(body[field], list):
            body[field] = list(body[field])  # the SDK accepts any iterable
    return body


def _omitted(value: Any) -> bool:
    return value is None or isinstance(value, (openai.NotGiven, openai.Omit))


def _model_and_effort(body: dict) -> tuple[str, str | None]:
    effort = body.get("reasoning_effort")
    return body["model"], effort if isinstance(effort, str) else None


def _gated_sync(gk: Gatekeeper, kwargs: dict) -> dict:
    body = _tool_body(kwargs)
    if body is None or not isinstance(kwargs.get("model"), str):
        return kwargs
    gk.gate(body, *_model_and_effort(body))
    return body


async def _gated_async(gk: Gatekeeper, kwargs: dict) -> dict:
    body = _tool_body(kwargs)
    if body is None or not isinstance(kwargs.get("model"), str):
        return kwargs
    await gk.agate(body, *_model_and_effort(body))
    return body
