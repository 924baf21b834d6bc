"""An MCP server (the SDK's MCPServer over stdio) with more to read than its tools, for
tests/mcp/test_mcp_reads.py: `python reads_server.py`. What reaches it is appended to
$TOY_DIR/calls.log (one JSON object a line) before it acts.

- the tool `deploy`;
- the resources `secret://token` (named `token`, a secret) and `doc://readme` (`readme`);
- the resource template `act://{name}` (named `act`), whose read performs an action (logged);
- the prompts `leak` (its text holds the secret) and `hello`;
- a completion handler answering `<prompt or template>:<value>1`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mcp import types
from mcp.server.mcpserver import MCPServer

SECRET = "s3cret-vault-token"


def _log(what: str, **details: Any) -> None:
    with open(Path(os.environ["TOY_DIR"]) / "calls.log", "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": what} | details) + "\n")


def main() -> None:
    server = MCPServer("vault")

    @server.tool(description="Deploys the service.")
    def deploy() -> str:
        _log("deploy")
        return "deployed"

    @server.resource("secret://token", name="token", description="The deploy token.")
    def token() -> str:
        _log("read token")
        return SECRET

    @server.resource("doc://readme", name="readme", description="How to use the vault.")
    def readme() -> str:
        return "the vault readme"

    @server.resource("act://{name}", name="act", description="Reading it performs the action.")
    def act(name: str) -> str:
        _log("act", name=name)
        return f"performed {name}"

    @server.prompt(name="leak", description="Has the token in it.")
    def leak() -> str:
        _log("get leak")
        return f"Use the token {SECRET}."

    @server.prompt(name="hello", description="Greets.")
    def hello(who: str) -> str:
        return f"Hello {who}"

    @server.completion()
    async def completion(ref: Any, argument: Any, context: Any) -> types.Completion:
        what = ref.name if isinstance(ref, types.PromptReference) else ref.uri
        _log("complete", ref=what)
        return types.Completion(values=[f"{what}:{argument.value}1"])

    server.run("stdio")


if __name__ == "__main__":
    main()
