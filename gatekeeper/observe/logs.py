"""structlog configuration, in one place: JSON lines on stderr for `gatekeeper serve`, readable
text for the CLI, and silence for a library.

Every module takes its logger from `get_logger`. Until structlog is configured (by `configure`
below, which `gatekeeper serve` and the CLI call, or by the application itself), a line goes to
stdlib `logging` under the module's name (`gatekeeper.store`, ...), where the package logger's
`NullHandler` keeps it quiet unless the application configures logging: the convention httpx
follows, so importing gatekeeper never writes to stdout or stderr on its own.

A request's context (request_id, model, effort, tier, source, tools kept and hidden, upstream
status, blocked calls) is bound where it is learnt (`bind`), merged into every line logged while
the request runs (the final `request` line included), and undone when the request ends
(`request_scope`). Where lines pass through `merge_context` (`gatekeeper serve`, the CLI, the
stdlib path before structlog is configured, or an application that lists it), the context is
one dict in one context variable, replaced (never changed in place) at each `bind`: a task
started meanwhile keeps what was bound before it, as with structlog's own context variables,
which cost a variable per field and a walk of the whole context per line (a third of the
request line's price on the proxy's hot path). Where an application configured structlog
without it, the context is structlog's own (`bind_contextvars`), so its `merge_contextvars`
still finds it. structlog's own context (an application's, in process) is merged into every
line either way, and a request scope gives it back as it was.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import orjson
import structlog

from gatekeeper.observe.redact import cap_strings

logging.getLogger("gatekeeper").addHandler(logging.NullHandler())

# The context of the request being served: None outside `request_scope`, and inside one whose
# lines read structlog's own context (`_merged_here`), where `bind` writes there instead.
_REQUEST: ContextVar[dict[str, Any] | None] = ContextVar("gatekeeper_request_log_context", default=None)


def bind(**fields: Any) -> None:
    """Add `fields` to the request's log context (structlog's own outside a request scope, or
    when the lines do not pass through `merge_context`)."""
    context = _REQUEST.get()
    if context is None:
        structlog.contextvars.bind_contextvars(**fields)
    else:
        _REQUEST.set(context | fields)


def bound() -> dict[str, Any]:
    """What the request bound so far (structlog's own context when that is where it binds)."""
    context = _REQUEST.get()
    return structlog.contextvars.get_contextvars() if context is None else context


def merge_context(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the request's context, then structlog's own, under the line's own
    fields (a field the call site names wins)."""
    context = _REQUEST.get()
    if context:
        for key, value in context.items():
            event.setdefault(key, value)
    return structlog.contextvars.merge_contextvars(logger, method, event)


class _Clock:
    """The `timestamp` of a line, as structlog's `TimeStamper(fmt="iso", utc=True)` writes it
    (always with its microseconds), at a third of its price: a second's date and time are
    formatted once."""

    __slots__ = ("formatted",)

    def __init__(self) -> None:
        self.formatted = (-1, "")  # one tuple, replaced whole: a thread never reads half of it

    def __call__(self, logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        now = time.time()
        second, text = self.formatted
        if int(now) != second:
            second = int(now)
            text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self.formatted = (second, text)
        event["timestamp"] = f"{text}.{int((now - second) * 1_000_000):06d}Z"
        return event


# Lines sent to stdlib logging: skipped before any work when the level is off, then one JSON text.
_TO_STDLIB: list[structlog.typing.Processor] = [
    structlog.stdlib.filter_by_level,
    merge_context,
    cap_strings,
    structlog.processors.JSONRenderer(),
]


class _Logger:
    """A module's logger: structlog's own once structlog is configured (checked at every call, so
    `structlog.testing.capture_logs` sees the lines too), stdlib logging before that."""

    __slots__ = ("_configured", "_unconfigured")

    def __init__(self, name: str) -> None:
        self._configured = structlog.get_logger(name)
        self._unconfigured = structlog.wrap_logger(
            logging.getLogger(name), processors=_TO_STDLIB, wrapper_class=structlog.stdlib.BoundLogger
        )

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._configured if structlog.is_configured() else self._unconfigured, attr)


def get_logger(name: str) -> Any:
    """The logger of module `name` (`get_logger(__name__)`); use it for every log line."""
    return _Logger(name)


_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(level: str = "info", json: bool = True) -> None:
    """Send every structlog line to stderr, as JSON (servers) or as readable text (CLI)."""
    if json:
        # The proxy writes one line per request: orjson straight to bytes costs a fraction of json.dumps.
        renderer: structlog.typing.Processor = structlog.processors.JSONRenderer(serializer=orjson.dumps)
        factory: structlog.typing.WrappedLogger = structlog.BytesLoggerFactory(file=sys.stderr.buffer)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=False)
        factory = structlog.PrintLoggerFactory(file=sys.stderr)
    structlog.configure(
        processors=[
            merge_context,
            structlog.processors.add_log_level,
            _Clock(),
            cap_strings,  # last: whatever a call site logged, no secret URL, no unbounded string
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        # Caching binds every module logger to this configuration for good: worth it on a server's
        # hot path, not in CLI commands (which tests also run in-process, next to capture_logs).
        cache_logger_on_first_use=json,
    )


def _merged_here() -> bool:
    """Do lines pass through `merge_context` (structlog unconfigured: the stdlib chain does)?"""
    return not structlog.is_configured() or merge_context in structlog.get_config()["processors"]


@contextmanager
def request_scope(**fields: Any) -> Iterator[None]:
    """Bind `fields` for one request (a scope inside another starts from the outer one's
    context); at exit the log context is as it was before, whatever the request bound meanwhile
    (a caller's own structlog context, in process, is given back as it was)."""
    outer = _REQUEST.get()
    if _merged_here():
        _REQUEST.set((outer or {}) | fields)
        try:
            yield
        finally:
            _REQUEST.set(outer)
        return
    # An application's own structlog chain reads structlog's context alone: bind there.
    saved = structlog.contextvars.get_contextvars()
    _REQUEST.set(None)
    structlog.contextvars.bind_contextvars(**(outer or {}), **fields)
    try:
        yield
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**saved)
        _REQUEST.set(outer)
