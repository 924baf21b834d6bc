"""observe/logs.py: what a request binds reaches every line it logs, and nothing else (not the
caller's context, not a task started before the bind, not the next request); every line says
when it was written."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime

import structlog
from structlog.testing import capture_logs

from gatekeeper.observe import logs
from gatekeeper.observe.logs import merge_context

log = logs.get_logger(__name__)


def test_every_line_of_a_request_carries_what_it_bound_and_the_scope_undoes_it() -> None:
    with capture_logs(processors=[merge_context]) as lines:
        with logs.request_scope(request_id="r1"):
            logs.bind(model="m")
            log.info("first")
            logs.bind(tier="small", model="m2")  # a later bind replaces a field
            log.info("request", tier="named-here-wins")
        log.info("after")
    first, request, after = lines
    assert (first["request_id"], first["model"]) == ("r1", "m") and "tier" not in first
    assert (request["model"], request["tier"]) == ("m2", "named-here-wins")
    assert "request_id" not in after and logs.bound() == {}


def test_a_request_leaves_the_callers_structlog_context_as_it_was_and_still_logs_it() -> None:
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(job="mine")
    try:
        with capture_logs(processors=[merge_context]) as lines:
            with logs.request_scope():
                logs.bind(model="m")
                log.info("inside")
        assert (lines[0]["job"], lines[0]["model"]) == ("mine", "m")
        assert structlog.contextvars.get_contextvars() == {"job": "mine"}
    finally:
        structlog.contextvars.clear_contextvars()


def test_outside_a_request_bind_is_structlogs_own() -> None:
    structlog.contextvars.clear_contextvars()
    try:
        logs.bind(model="m")
        assert structlog.contextvars.get_contextvars() == {"model": "m"} == logs.bound()
    finally:
        structlog.contextvars.clear_contextvars()


def test_a_nested_scope_starts_from_the_outer_one_and_gives_it_nothing_back() -> None:
    with logs.request_scope(request_id="outer"):
        with logs.request_scope(step="inner"):
            logs.bind(model="m")
            assert logs.bound() == {"request_id": "outer", "step": "inner", "model": "m"}
        assert logs.bound() == {"request_id": "outer"}


async def test_a_task_keeps_what_was_bound_before_it_started_and_binds_only_its_own() -> None:
    seen: dict[str, object] = {}
    started, bound_after = asyncio.Event(), asyncio.Event()

    async def child() -> None:
        started.set()
        await bound_after.wait()
        seen.update(logs.bound())
        logs.bind(child_field=1)

    with logs.request_scope(request_id="r1"):
        task = asyncio.create_task(child())
        await started.wait()
        logs.bind(upstream_status=200)  # after the task started: not its
        bound_after.set()
        await task
        assert seen == {"request_id": "r1"}
        assert logs.bound() == {"request_id": "r1", "upstream_status": 200}  # nothing of the child's


def test_a_lines_timestamp_is_utc_iso_to_the_microsecond_and_says_when_it_was_written() -> None:
    clock = logs._Clock()
    for _ in range(3):  # the second's text formatted once, then reused: the same either way
        before = time.time()
        stamp = clock(None, "info", {})["timestamp"]
        after = time.time()
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp), stamp
        written = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
        assert before - 1e-6 <= written <= after
        time.sleep(0.6)  # the next one in another second, at least once
