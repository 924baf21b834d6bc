"""MCP servers the gateway tests start over stdio: `python toy_server.py MODE`.

- `notes` (the SDK's MCPServer): read_note, write_note, progress_steps, broken_tool, crash, a
  resource and a prompt. Every tool call is appended to $TOY_DIR/calls.log before it runs, so a
  test can tell whether a call reached the server at all.
- `growing` (MCPServer): its tool `grow` adds `grown_tool` and sends tools/list_changed.
- `duplicate` (the low-level Server): lists the same tool twice.
- `odd_names` (the low-level Server): a tool named `good_one`, one with a dot, one of 70 characters.
- `hang` (the low-level Server): never answers tools/list.
- `garbage` (raw JSON-RPC over stdio): answers initialize, then a tools/list result whose `tools`
  is not a list.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp import types
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server


def _log_call(name: str, arguments: dict[str, Any]) -> None:
    with open(Path(os.environ["TOY_DIR"]) / "calls.log", "a", encoding="utf-8") as f:
        f.write(json.dumps({"tool": name, "arguments": arguments}) + "\n")


def notes() -> None:
    server = MCPServer("notes")
    folder = Path(os.environ["TOY_DIR"])

    @server.tool(description="Read a note by name.")
    def read_note(name: str) -> str:
        _log_call("read_note", {"name": name})
        path = folder / f"{name}.txt"
        return path.read_text(encoding="utf-8") if path.exists() else ""

    @server.tool(description="Write a note (replaces it).")
    def write_note(name: str, text: str) -> str:
        _log_call("write_note", {"name": name, "text": text})
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
        return f"wrote {len(text)} characters"

    @server.tool(description="Count to n, reporting progress.")
    async def progress_steps(n: int, ctx: Context) -> dict[str, int]:
        _log_call("progress_steps", {"n": n})
        for i in range(n):
            await ctx.report_progress(i + 1, n, f"step {i + 1}")
        return {"counted": n}

    @server.tool(description="Always fails.")
    def broken_tool() -> str:
        _log_call("broken_tool", {})
        raise ToolError("the tool broke on purpose")

    @server.tool(description="Ends the server process.")
    def crash() -> str:
        _log_call("crash", {})
        os._exit(3)

    @server.resource("note://readme", description="What this server is.")
    def readme() -> str:
        return "notes server readme"

    @server.prompt(description="Summarise a note.")
    def summarise(name: str) -> str:
        return f"Summarise the note {name}."

    server.run("stdio")


def growing() -> None:
    server = MCPServer("growing")

    @server.tool(description="Adds a tool to this server and says so.")
    async def grow(ctx: Context) -> str:
        server.add_tool(lambda: "grown", name="grown_tool", description="added at run time")
        await ctx.session.send_tool_list_changed()
        return "grown"

    server.run("stdio")


def _lowlevel(on_list_tools: Any) -> None:
    server = Server("bad", on_list_tools=on_list_tools)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def duplicate() -> None:
    tool = types.Tool(name="twice", description="listed twice", input_schema={"type": "object"})

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool, tool])

    _lowlevel(list_tools)


def odd_names() -> None:
    names = ["good_one", "has.dot", "x" * 70]
    tools = [types.Tool(name=n, description=n[:10], input_schema={"type": "object"}) for n in names]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    _lowlevel(list_tools)


def hang() -> None:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    _lowlevel(list_tools)


def garbage() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        if message["method"] == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "garbage", "version": "0"},
            }
        elif message["method"] == "tools/list":
            result = {"tools": "not a list"}
        else:
            result = {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    modes = {"notes": notes, "growing": growing, "duplicate": duplicate, "odd_names": odd_names, "hang": hang}
    modes["garbage"] = garbage
    modes[sys.argv[1]]()
