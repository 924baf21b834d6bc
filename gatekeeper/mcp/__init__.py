"""The MCP gateway: configured MCP servers behind one Streamable HTTP endpoint, each model shown
only the tools its measured tier admits, and every other call refused before it is forwarded.

    gatekeeper.mcp.names     the name scheme: `<label>__<tool>` to clients, `<label>.<tool>` in rules
    gatekeeper.mcp.upstream  one configured server, connected, listed, supervised
    gatekeeper.mcp.gateway   the gateway's MCP server: tier -> tools/list, tools/call, list_changed
    gatekeeper.mcp.http      the door: Origin, key, throttle, the model a session is bound to
    gatekeeper.mcp.metrics   gatekeeper_mcp_* counters

Needs the `mcp` extra (`pip install 'gatekeeper[mcp]'`); the proxy imports this package only when
`mcp.servers` is configured.
"""

from gatekeeper.mcp.gateway import McpGateway
from gatekeeper.mcp.http import mcp_routes

__all__ = ["McpGateway", "mcp_routes"]
