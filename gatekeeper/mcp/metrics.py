"""The gateway's Prometheus metrics, in gatekeeper's one registry (served at /metrics).

`model` is the profile key (`model@effort`) when a pin or a profile decided the tier; any other
name is counted as `unmeasured`: model names come from clients and must not grow the label set.
"""

from prometheus_client import Counter, Gauge

from gatekeeper.observe.metrics import REGISTRY

TOOLS_LISTED = Counter(
    "gatekeeper_mcp_tools_listed",
    "MCP tools shown in tools/list answers, by server and model",
    ["server", "model"],
    registry=REGISTRY,
)
TOOLS_HIDDEN = Counter(
    "gatekeeper_mcp_tools_hidden",
    "MCP tools left out of tools/list answers because of the model's tier",
    ["server", "model"],
    registry=REGISTRY,
)
CALLS_REFUSED = Counter(
    "gatekeeper_mcp_calls_refused",
    "tools/call requests refused and never forwarded (a tool the tier hides, or no server has)",
    ["server", "model"],
    registry=REGISTRY,
)
CALLS_FORWARDED = Counter(
    "gatekeeper_mcp_calls_forwarded",
    "tools/call requests forwarded to their server, by outcome (ok, tool_error, failed)",
    ["server", "model", "outcome"],
    registry=REGISTRY,
)
SERVER_UP = Gauge(
    "gatekeeper_mcp_server_up",
    "1 while the MCP server is connected and listed (under serve --workers: by every live worker)",
    ["server"],
    registry=REGISTRY,
    multiprocess_mode="livemin",  # one value per server across workers; a stopped worker's is dropped
)
LIST_CHANGED = Counter(
    "gatekeeper_mcp_list_changed",
    "notifications/tools/list_changed sent to open sessions whose visible tools changed",
    registry=REGISTRY,
)
