"""structlog configuration, in one place: JSON lines on stderr for `gatekeeper serve`, readable
text for the CLI, and silence for a library.

Every module takes its logger from `get_logger`. Until structlog is configured (by `configure`
below, which `gatekeeper serve` and the CLI call, or by the application itself), a line goes to
stdlib `logging` under the module's name (`gatekeeper.store`, ...), where the package logger's
`NullHandler` keeps it quiet unless the application configures logging: the convention httpx
follows, so importing gatekeeper never writes to stdout or stderr on its own.

A request's context (request_id, model, effort, tier, source, tools kept and hidden, upstream
status, blocked calls) lives in structlog's context variables: bound where it is learnt
(`structlog.contextvars.bind_contextvars`), merged into every line logged while the request runs
(the final `request` line included), and undone when the request ends (`request_scope`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import structlog

from gatekeeper.observe.redact import cap_strings

logging.getLogger("gatekeeper").addHandler(logging.NullHandler())

# Lines sent to stdlib logging: skipped before any work when the level is off, then one JSON text.
_TO_STDLIB: list[structlog.typing.Processor] = [
    structlog.stdlib.filter_by_level,
    structlog.contextvars.merge_contextvars,
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
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            cap_strings,  # last: whatever a call site logged, no secret URL, no unbounded string
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        # Caching binds every module logger to this configuration for good: worth it on a server's
        # hot path, not in CLI commands (which tests also run in-process, next to capture_logs).
        cache_logger_on_first_use=json,
    )


@contextmanager
def request_scope(**fields: Any) -> Iterator[None]:
    """Bind `fields` for one request; at exit the log context is as it was before, whatever the
    request bound meanwhile (a caller's own context, in process, is kept and restored)."""
    saved = structlog.contextvars.get_contextvars()
    structlog.contextvars.bind_contextvars(**fields)
    try:
        yield
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(**saved)
