"""structlog configuration, in one place: JSON lines on stderr."""

from __future__ import annotations

import logging
import sys

import orjson
import structlog

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
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=factory,
        # Caching binds every module logger to this configuration for good: worth it on a server's
        # hot path, not in CLI commands (which tests also run in-process, next to capture_logs).
        cache_logger_on_first_use=json,
    )
