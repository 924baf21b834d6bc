"""Prometheus metrics, in one registry that `/metrics` serves.

Under `serve --workers N` (prometheus_client's multiprocess mode, `PROMETHEUS_MULTIPROC_DIR` set
before the workers start) every worker writes its values to that directory and `/metrics` on any
worker serves their sums."""

import os

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

REQUESTS = Counter(
    "gatekeeper_requests",
    "Chat completion requests, by applied tier and profile source",
    ["tier", "source"],
    registry=REGISTRY,
)
TOOLS_HIDDEN = Counter("gatekeeper_tools_hidden", "Tools removed from requests because of the tier", registry=REGISTRY)
TOOL_CALLS_BLOCKED = Counter(
    "gatekeeper_tool_calls_blocked", "Tool calls removed from answers (hidden or invented tools)", registry=REGISTRY
)
BENCHMARKS = Counter("gatekeeper_benchmarks", "Lazy measurements, by outcome", ["outcome"], registry=REGISTRY)
BENCHMARK_SECONDS = Histogram(
    "gatekeeper_benchmark_seconds",
    "Duration of successful lazy measurements",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
    registry=REGISTRY,
)
UPSTREAM_ERRORS = Counter(
    "gatekeeper_upstream_errors", "Upstream failures seen by the proxy, by kind", ["kind"], registry=REGISTRY
)
DRIFT_CALLS = Counter(
    "gatekeeper_drift_calls", "Tool calls in relayed answers, by fault (ok when sound)", ["fault"], registry=REGISTRY
)
DRIFT_DEMOTIONS = Counter(
    "gatekeeper_drift_demotions", "Pairs demoted one tier for drifting", ["from_tier", "to_tier"], registry=REGISTRY
)
ROUTED = Counter(
    "gatekeeper_routed",
    "Routing decisions for requests with tools (routing:), by reason: escalated, economized, fallback, none",
    ["reason"],
    registry=REGISTRY,
)
TOOL_BUDGET = Counter(
    "gatekeeper_tool_budget_exceeded",
    "Requests offering more tools than their pair's budget (tools.budget), by action: reported, trimmed, "
    "refused, routed",
    ["action"],
    registry=REGISTRY,
)


def served_registry() -> CollectorRegistry:
    """What `/metrics` serves: this process's registry, or every worker's summed."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    from prometheus_client import multiprocess

    summed = CollectorRegistry()
    multiprocess.MultiProcessCollector(summed)  # type: ignore[no-untyped-call]
    return summed
