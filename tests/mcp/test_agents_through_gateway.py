"""An agent framework unmodified through the gateway: the OpenAI Agents SDK takes its tools from
`/mcp/<model>` (`MCPServerStreamableHttp`) and its model from the proxy; the model sees, and the
agent can call, only the tools that model's tier admits."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import await_until
from gateway_helpers import KEY, connect, gateway, tool_names, toy
from scripted import ScriptedServer

WRITE = {"name": "notes__write_note", "arguments": {"name": "agent", "text": "from the agent"}}


def scripted_model(body: dict) -> dict:
    """Calls notes__write_note first; answers once the tool's result is in the conversation."""
    if any(m.get("role") == "tool" for m in body["messages"]):
        return {"content": "done", "tool_calls": []}
    return {"content": None, "tool_calls": [WRITE]}


def offered(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


async def run_agent(proxy_url: str, model: str) -> str:
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from openai import AsyncOpenAI

    set_tracing_disabled(True)
    tools = MCPServerStreamableHttp(
        params={"url": f"{proxy_url}/mcp/{model}", "headers": {"Authorization": f"Bearer {KEY}"}},
        name="gatekeeper",
    )
    async with tools:
        client = AsyncOpenAI(base_url=proxy_url + "/v1", api_key="client-key", max_retries=0)
        agent = Agent(
            name="writer",
            instructions="Write the note.",
            model=OpenAIChatCompletionsModel(model=model, openai_client=client),
            mcp_servers=[tools],
        )
        result = await Runner.run(agent, "write a note", max_turns=4)
    return str(result.final_output)


async def test_the_agents_sdk_gets_and_calls_only_what_the_tier_admits(tmp_path: Path, default_suite):
    notes = tmp_path / "notes"
    notes.mkdir()
    with ScriptedServer(scripted_model) as model_upstream:
        servers = {"notes": toy("notes", notes)}
        with gateway(tmp_path, default_suite, servers, upstream={"base_url": model_upstream.base_url}) as proxy:

            async def ready() -> bool:
                async with connect(proxy.url + "/mcp/large-model") as session:
                    return "notes__write_note" in await tool_names(session)

            await await_until(ready, "the notes server", timeout_s=60)

            assert await run_agent(proxy.url, "large-model") == "done"
            assert "notes__write_note" in offered(model_upstream.requests[0])
            assert (notes / "agent.txt").read_text() == "from the agent"

            model_upstream.requests.clear()
            (notes / "agent.txt").unlink()
            await run_agent(proxy.url, "small-model")
            assert offered(model_upstream.requests[0]) == ["notes__read_note", "notes__broken_tool"]
            assert not (notes / "agent.txt").exists()  # the invented call was not run
            log = (notes / "calls.log").read_text().splitlines()
            assert [json.loads(line)["tool"] for line in log] == ["write_note"]
