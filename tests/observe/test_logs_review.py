"""Review of 24322ac (the request's log context in one context variable): what the change does to
a line's context when the processors that merge it are not gatekeeper's own `merge_context`.

gatekeeper's modules log through structlog's configuration once structlog is configured, by
`gatekeeper serve` (`logs.configure`) or by the application itself (observe/logs.py `_Logger`):
an application that embeds the proxy's app or gates in process, with structlog configured the
way structlog documents it (`structlog.contextvars.merge_contextvars` first), got every line of
a request with the request's context before this commit, and none of it after."""

from __future__ import annotations

from pathlib import Path

import structlog
from conftest import make_profile, seed_store, settings_for, small_model_proxy, tool, wait_until
from structlog.testing import capture_logs
from upstreams import NativeServer

from gatekeeper import Gatekeeper, gate_body
from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import Suite

HI = [{"role": "user", "content": "hi"}]
# structlog's own processor, as `structlog.configure` documents it and as its default config has it.
STRUCTLOGS_OWN = [structlog.contextvars.merge_contextvars]


def test_the_proxys_request_line_keeps_its_context_under_structlogs_own_merge_contextvars(
    store_path: Path, default_suite: Suite
) -> None:
    """An application serving the proxy's app with its own structlog configuration: the one
    `request` line (the audit record) names the request, the model and the tier."""
    with (
        NativeServer(lambda body: {"content": "ok"}) as upstream,
        small_model_proxy(upstream.base_url, store_path, default_suite) as proxy,
        capture_logs(processors=STRUCTLOGS_OWN) as lines,
    ):
        proxy.client.chat.completions.create(
            model="small-model", messages=HI, extra_headers={"x-request-id": "app-req-1"}
        )
        line = wait_until(lambda: next((e for e in lines if e["event"] == "request"), None), "the request line", 10)
    assert (line.get("request_id"), line.get("model"), line.get("tier"), line.get("upstream_status")) == (
        "app-req-1",
        "small-model",
        "small",
        200,
    ), line


def test_in_process_gatings_lines_keep_the_request_context_under_structlogs_own_merge_contextvars(
    store_path: Path, default_suite: Suite
) -> None:
    """`gate_body` in an application with its own structlog configuration: a line logged while
    the body is gated (here: more tools offered than the pair's budget) says for which model,
    effort and tier, and the caller's own context is still merged and left as it was."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    settings = settings_for("http://127.0.0.1:9/v1", store_path, pins={"pinned": {"tier": "large", "tool_budget": 1}})
    gk = Gatekeeper(settings)
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(app_request="a1")
    try:
        body = {"model": "pinned", "messages": HI, "tools": [tool("read_file"), tool("write_file")]}
        with capture_logs(processors=STRUCTLOGS_OWN) as lines:
            gate_body(gk, "chat", body)
        (line,) = [e for e in lines if e["event"] == "tool_budget_exceeded"]
        assert line["app_request"] == "a1"  # the caller's own context: merged
        assert (line.get("model"), line.get("effort"), line.get("tier")) == ("pinned", "default", "large"), line
        assert structlog.contextvars.get_contextvars() == {"app_request": "a1"}  # and left as it was
    finally:
        structlog.contextvars.clear_contextvars()
        gk.close()
