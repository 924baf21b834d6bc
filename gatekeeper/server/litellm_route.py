"""Models configured under `models:`, answered through litellm instead of the upstream.

The route is a chat upstream like any other (`LiteLLMUpstream`, an `Upstream` mounted at the
route's model name): the proxy's pipeline gates the request and enforces the answer (plain and
streamed), logs and counts it. This module only calls litellm.

Only the OpenAI Chat Completions fields below reach `litellm.acompletion`. Everything else in
the client's body (`base_url`, `api_base`, `api_key`, `extra_headers`, `mock_response`, any
litellm-only or provider-specific key) is dropped and logged: a client must never redirect the
route, add headers to the provider call or swap the operator's key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from gatekeeper.config import ModelRoute
from gatekeeper.errors import ProxyError
from gatekeeper.observe import logs, metrics
from gatekeeper.observe.redact import address_forms, redact
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.base import Event
from gatekeeper.server.upstream import UpstreamRequest, rate_limit_headers

log = logs.get_logger(__name__)

# Chat fields a litellm route is not given, though chat's gate knows them: `model` (the route
# sets its own); fields of one kind of server (vLLM and llama.cpp sampling and template knobs);
# OpenAI's server-side state, caching and billing (`store`, `metadata`, `prompt_cache_*`,
# `service_tier`, `safety_identifier`); and outputs and tools that litellm maps per provider
# (`audio`, `modalities`, `prediction`, `verbosity`, `web_search_options`, `moderation`), which
# the route has never been checked with. What is left is what `litellm.acompletion` takes as
# OpenAI's own parameters.
NOT_FOR_LITELLM = frozenset(
    {
        "model",
        *("chat_template_kwargs", "min_p", "repetition_penalty", "top_k"),
        *("metadata", "prompt_cache_key", "prompt_cache_options", "prompt_cache_retention"),
        *("safety_identifier", "service_tier", "store"),
        *("audio", "modalities", "moderation", "prediction", "verbosity", "web_search_options"),
    }
)


def _chat_fields() -> frozenset[str]:
    chat = protocols.protocol("chat")
    return frozenset(chat.request_fields if chat is not None else ())


# Fields of an OpenAI chat request that gatekeeper understands (tools ones already gated): chat's
# own allowlist (protocols/chat/fields.py, through the registry) minus those above.
ALLOWED_FIELDS = _chat_fields() - NOT_FOR_LITELLM


@dataclass
class LiteLLMAnswer:
    """litellm's answer as an `UpstreamAnswer`: a plain chat JSON body, or chat events."""

    body: bytes | None = None  # a plain answer (chat JSON)
    stream: AsyncIterator[list[Event]] | None = None  # a streamed one (chat events)
    status_code: int = 200

    def passed_headers(self) -> dict[str, str]:
        return {"content-type": "text/event-stream" if self.stream is not None else "application/json"}

    async def read(self) -> bytes:
        return self.body or b""

    def events(self) -> AsyncIterator[list[Event]]:
        if self.stream is None:
            raise ProxyError(502, "the litellm route gave a plain answer to a streamed request", "upstream_invalid")
        return self.stream

    async def chunks(self) -> AsyncIterator[bytes]:
        yield await self.read()

    async def aclose(self) -> None:
        if self.stream is not None:
            await self.stream.aclose()  # type: ignore[attr-defined]


class LiteLLMUpstream:
    """One `models:` route. It speaks chat only: other protocols are translated to chat first."""

    protocols: tuple[str, ...] = ("chat",)

    def __init__(self, route: ModelRoute) -> None:
        self.route = route

    async def send(self, request: UpstreamRequest) -> LiteLLMAnswer:
        if request.body is None or request.path != "/chat/completions":
            raise ProxyError(404, f"model {self.route.name!r} is served through litellm, for chat only", "not_found")
        return await complete(self.route, request.body, request.stream)

    async def aclose(self) -> None:
        return None


def request_fields(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The allowed fields of `body`, and the names of those dropped."""
    kept = {k: v for k, v in body.items() if k in ALLOWED_FIELDS}
    dropped = sorted(k for k in body if k not in ALLOWED_FIELDS and k != "model")
    return kept, dropped


async def complete(route: ModelRoute, body: dict[str, Any], stream: bool) -> LiteLLMAnswer:
    request, dropped = request_fields(body)
    if dropped:
        log.warning("litellm_fields_dropped", fields=dropped)
    operator = {k: v for k, v in (("api_key", route.api_key), ("api_base", route.api_base)) if v}
    import litellm  # heavy (seconds): imported by the first call of a route, not when the app starts

    try:
        response = await litellm.acompletion(model=route.litellm_model, **request, **operator)
    except Exception as exc:  # noqa: BLE001 - litellm raises many kinds; the client gets a clear error
        raise _upstream_error(route, exc) from None
    if stream or request.get("stream"):
        return LiteLLMAnswer(stream=_events(route, response))
    return LiteLLMAnswer(body=orjson.dumps(response.model_dump()))


async def _events(route: ModelRoute, response: Any) -> AsyncIterator[list[Event]]:
    try:
        async for chunk in response:
            yield [Event(orjson.dumps(chunk.model_dump(exclude_none=True)).decode())]
    except Exception as exc:  # noqa: BLE001
        raise _upstream_error(route, exc) from None
    yield [Event("[DONE]")]


def _upstream_error(route: ModelRoute, exc: Exception) -> ProxyError:
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int) or not 400 <= status < 600:
        status = 502
    metrics.UPSTREAM_ERRORS.labels(str(status) if status != 502 else "litellm").inc()
    # Provider errors may quote the request (a URL with `?key=`, the key itself): never the operator's.
    detail = _scrubbed(route, f"{type(exc).__name__}: {exc}")
    log.warning("upstream_failed", route=route.name, litellm_model=route.litellm_model, status=status, error=detail)
    if status >= 500:
        # A provider that failed or could not be reached: where it is and what the connection
        # said (the route's provider model, its api_base, a path) are the log's, not the client's.
        message = f"model {route.name!r}: the provider failed ({type(exc).__name__})"
    else:
        # The provider's verdict on the request (a bad field, a context too long): the client's to act on.
        message = f"model {route.name!r}: {detail}"
    return ProxyError(status, message, None, "upstream_error", _retry_headers(exc))


def _scrubbed(route: ModelRoute, text: str) -> str:
    """`text` without the operator's key, the route's api_base (its URL, origin or `host:port`)
    or its provider model id."""
    addresses = address_forms(route.api_base) if route.api_base else []
    secrets = [route.api_key, route.litellm_model, route.api_base, *addresses]
    for secret in sorted(secrets, key=lambda s: len(s or ""), reverse=True):
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return redact(text)


def _retry_headers(exc: Exception) -> dict[str, str]:
    """The provider's Retry-After and rate-limit headers, from litellm's exception (its openai
    base class keeps the provider's HTTP response), for the client's backoff."""
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if not isinstance(headers, Mapping):
        headers = getattr(exc, "litellm_response_headers", None)
    if not isinstance(headers, Mapping):
        return {}
    return rate_limit_headers({str(k).lower(): str(v) for k, v in headers.items()})
