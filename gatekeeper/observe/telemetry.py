"""OpenTelemetry spans for a request and for a measurement: off unless configured.

The spans are made through `opentelemetry-api` (extra `otel`), which does nothing until the
application sets a tracer provider (or `gatekeeper serve` runs under `opentelemetry-instrument`
with an exporter configured): without the package, `span()` is a no-op that costs one call.
Names and attributes follow OpenTelemetry's GenAI semantic conventions where they apply (the
span name `{gen_ai.operation.name} {gen_ai.request.model}`, `gen_ai.operation.name`,
`gen_ai.request.model`); what gatekeeper decides has its own `gatekeeper.*` attributes:

    gatekeeper.protocol         chat | responses | messages (the client's protocol)
    gatekeeper.effort           the requested effort (`default`: none sent)
    gatekeeper.tier             the tier applied
    gatekeeper.profile          measured | pinned | pending | unmeasured | demoted
    gatekeeper.tools.kept       the offered tools forwarded (names)
    gatekeeper.tools.hidden     the offered tools removed (names)
    gatekeeper.calls.blocked    calls removed from the answer (names)
    gatekeeper.routed           the `model@effort` actually used, when routing changed it
    gatekeeper.score.<category> a measurement's point estimates; .bound.<category> its lower bounds
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

_ENABLED = importlib.util.find_spec("opentelemetry") is not None
if _ENABLED:
    from opentelemetry import trace

Attribute = str | bool | int | float | list[str]


class Span(Protocol):
    def set(self, key: str, value: Attribute | None) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class _NoSpan:
    def set(self, key: str, value: Attribute | None) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        pass


class _OtelSpan:
    __slots__ = ("_span",)

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: Attribute | None) -> None:
        if value is not None:  # OpenTelemetry attributes cannot be None
            self._span.set_attribute(key, value)

    def fail(self, error: BaseException) -> None:
        self._span.set_status(trace.Status(trace.StatusCode.ERROR, type(error).__name__))
        self._span.set_attribute("error.type", type(error).__name__)


_NO_SPAN = _NoSpan()


@contextmanager
def span(operation: str, model: str, *, kind: str = "internal", **attributes: Attribute | None) -> Iterator[Span]:
    """A span named `{operation} {model}` (e.g. `chat gpt-4o`, `measure gpt-4o`); `attributes`
    are `gatekeeper.*` names without the prefix, dots written as underscores (`tools_kept`)."""
    if not _ENABLED:
        yield _NO_SPAN
        return
    tracer = trace.get_tracer("gatekeeper")
    span_kind = trace.SpanKind.CLIENT if kind == "client" else trace.SpanKind.INTERNAL
    with tracer.start_as_current_span(f"{operation} {model}", kind=span_kind, record_exception=False) as raw:
        if not raw.is_recording():
            yield _NO_SPAN
            return
        wrapped = _OtelSpan(raw)
        wrapped.set("gen_ai.operation.name", operation)
        wrapped.set("gen_ai.request.model", model)
        for key, value in attributes.items():
            wrapped.set("gatekeeper." + key.replace("_", "."), value)
        try:
            yield wrapped
        except BaseException as exc:
            wrapped.fail(exc)
            raise


def active() -> bool:
    """True when an application (or `opentelemetry-instrument`) has set a tracer provider: only
    then does the proxy pay for a span per request."""
    if not _ENABLED:
        return False
    return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


@contextmanager
def request_span(protocol: str) -> Iterator[Any]:
    """One proxy request's span (SERVER kind), named `chat {model}` once the model is known. The
    caller hands what the finished request learnt to the yielded `end(model, attributes, status)`
    (`attributes` by their full names; None: not known, not set)."""
    tracer = trace.get_tracer("gatekeeper")
    with tracer.start_as_current_span("chat", kind=trace.SpanKind.SERVER, record_exception=False) as raw:

        def end(model: str | None, attributes: Mapping[str, Attribute | None], status: int) -> None:
            if model is not None:
                raw.update_name(f"chat {model}")
                raw.set_attribute("gen_ai.request.model", model)
            raw.set_attribute("gen_ai.operation.name", "chat")
            raw.set_attribute("gatekeeper.protocol", protocol)
            raw.set_attribute("http.response.status_code", status)
            for attribute, value in attributes.items():
                if value is not None:
                    raw.set_attribute(attribute, value)
            if status >= 500:
                raw.set_status(trace.Status(trace.StatusCode.ERROR, f"HTTP {status}"))

        yield end
