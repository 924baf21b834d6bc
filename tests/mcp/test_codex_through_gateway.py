"""Codex (npm `@openai/codex`, pinned in tests/js/codex) unmodified, with the lines of docs/mcp.md: its
model through the proxy and its MCP tools from the gateway at `/mcp/<model>` with the gateway's
key from `bearer_token_env_var`. The model is shown only the MCP tools its tier admits."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, await_until
from gateway_helpers import KEY, connect, gateway, tool_names, toy
from upstreams import NativeServer

CODEX = ROOT / "tests" / "js" / "codex" / "node_modules" / ".bin" / "codex"
pytestmark = pytest.mark.skipif(not CODEX.exists(), reason="run `npm ci` in tests/js/codex (test.sh does)")


def docs_block(start: str) -> str:
    pages = "".join((ROOT / page).read_text() for page in ("docs/frameworks.md", "docs/mcp.md"))
    found = re.search(r"```toml\n(" + re.escape(start) + r".*?)```", pages, re.S)
    assert found, f"docs/frameworks.md and docs/mcp.md lack the Codex config.toml starting {start!r}"
    return found.group(1)


def gatekeeper_tools(body: dict) -> list[str]:
    """The functions of the Responses request's namespace for the MCP server named `gatekeeper`
    (Codex offers an MCP server's tools as a `namespace` tool `mcp__<server>...`)."""
    found = []
    for tool in body.get("tools") or []:
        if tool.get("type") == "namespace" and tool["name"].startswith("mcp__gatekeeper"):
            found += [inner["name"] for inner in tool.get("tools") or []]
    return found


async def test_codex_gets_only_the_mcp_tools_its_model_s_tier_admits(tmp_path: Path, default_suite):
    notes = tmp_path / "notes"
    notes.mkdir()
    with NativeServer(lambda body: {"content": "hello from the model"}) as upstream:
        protocols = {"base_url": upstream.base_url, "protocols": ["chat", "responses", "messages"]}
        with gateway(tmp_path, default_suite, {"notes": toy("notes", notes)}, upstream=protocols) as proxy:

            async def ready() -> bool:
                async with connect(proxy.url + "/mcp/small-model") as session:
                    return bool(await tool_names(session))

            await await_until(ready, "the notes server", timeout_s=60)
            home = tmp_path / "codex-home"
            home.mkdir()
            config = docs_block('model = "my-model"') + "\n" + docs_block("[mcp_servers.gatekeeper]")
            config = config.replace("http://127.0.0.1:8000", proxy.url)
            config = config.replace("my-model", "small-model").replace("gpt-5-codex", "small-model")
            (home / "config.toml").write_text(config)
            done = subprocess.run(
                [str(CODEX), "exec", "--skip-git-repo-check", "say hi"],
                cwd=tmp_path,
                env=os.environ | {"CODEX_HOME": str(home), "OPENAI_API_KEY": "k", "GATEKEEPER_MCP_KEY": KEY},
                capture_output=True,
                text=True,
                timeout=180,
                stdin=subprocess.DEVNULL,
            )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hello from the model" in done.stdout
    # small-model's tier: the read tools; write_note (medium), progress_steps and crash (large) hidden
    assert sorted(gatekeeper_tools(upstream.responses_requests[0])) == ["notes__broken_tool", "notes__read_note"]
