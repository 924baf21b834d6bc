"""The framework page's lines (docs/frameworks.md), run: each snippet below appears verbatim there, and is
executed here (with the proxy's real port for 127.0.0.1:8000 and a measured model for `my-model`)
to send one request with tools through the real proxy. Hidden tools never reach the upstream."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from conftest import ROOT, Proxy, small_model_proxy
from upstreams import NativeServer

SNIPPETS = {
    "agents": """\
from agents import set_default_openai_client
from openai import AsyncOpenAI
set_default_openai_client(AsyncOpenAI(base_url="http://127.0.0.1:8000/v1", api_key="..."))""",
    "pydantic-ai": """\
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
model = OpenAIResponsesModel("my-model", provider=OpenAIProvider(base_url="http://127.0.0.1:8000/v1", api_key="..."))""",
    "langchain-openai": """\
from langchain_openai import ChatOpenAI
llm = ChatOpenAI(model="my-model", base_url="http://127.0.0.1:8000/v1", api_key="...", use_responses_api=True)""",
    "langchain-anthropic": """\
from langchain_anthropic import ChatAnthropic
llm = ChatAnthropic(model="my-model", base_url="http://127.0.0.1:8000", api_key="...")""",
    "anthropic": """\
import anthropic
client = anthropic.Anthropic(base_url="http://127.0.0.1:8000", api_key="...")""",
    "claude-code": """\
export ANTHROPIC_BASE_URL=http://127.0.0.1:8000""",
}


def run(snippet: str, proxy: Proxy, namespace: dict | None = None) -> dict:
    code = snippet.replace("http://127.0.0.1:8000", proxy.url).replace("my-model", "small-model")
    scope = dict(namespace or {})
    exec(compile(code, "<docs/frameworks.md snippet>", "exec"), scope)
    return scope


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer() as server:
        yield server


@pytest.fixture
def proxy(upstream, store_path, default_suite) -> Iterator[Proxy]:
    with small_model_proxy(upstream.base_url, store_path, default_suite) as running:
        yield running


def offered(body: dict) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def read_file(path: str) -> str:
    """Read a file."""
    return "hello"


def write_file(path: str) -> str:
    """Write a file."""
    return "written"


def execute_command(path: str) -> str:
    """Run a command."""
    return "ran"


TOOLS = [read_file, write_file, execute_command]


def test_every_snippet_is_in_the_frameworks_page():
    page = (ROOT / "docs/frameworks.md").read_text()
    for name, snippet in SNIPPETS.items():
        assert snippet in page, f"docs/frameworks.md lacks the {name} lines this test runs"


async def test_openai_agents_sdk(proxy, upstream):
    from agents import Agent, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    run(SNIPPETS["agents"], proxy)
    agent = Agent(name="a", model="small-model", tools=[function_tool(f) for f in TOOLS])
    assert (await Runner.run(agent, "hi")).final_output == "ok"
    assert offered(upstream.responses_requests[-1]) == ["read_file"]


async def test_pydantic_ai(proxy, upstream):
    from pydantic_ai import Agent

    agent = Agent(run(SNIPPETS["pydantic-ai"], proxy)["model"], tools=TOOLS)
    assert (await agent.run("hi")).output == "ok"
    assert offered(upstream.responses_requests[-1]) == ["read_file"]


def test_langchain_openai(proxy, upstream):
    llm = run(SNIPPETS["langchain-openai"], proxy)["llm"]
    assert llm.bind_tools(TOOLS).invoke("hi").text == "ok"
    assert offered(upstream.responses_requests[-1]) == ["read_file"]


def test_langchain_anthropic(proxy, upstream):
    llm = run(SNIPPETS["langchain-anthropic"], proxy)["llm"]
    assert llm.bind_tools(TOOLS).invoke("hi").text == "ok"
    assert offered(upstream.messages_requests[-1]) == ["read_file"]


def test_anthropic_sdk(proxy, upstream):
    client = run(SNIPPETS["anthropic"], proxy)["client"]
    tools = [
        {"name": f.__name__, "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}
        for f in TOOLS
    ]
    message = client.messages.create(
        model="small-model", max_tokens=50, messages=[{"role": "user", "content": "hi"}], tools=tools
    )
    assert message.content[0].text == "ok" and offered(upstream.messages_requests[-1]) == ["read_file"]


def test_claude_code_base_url_variable(proxy, upstream, monkeypatch):
    """Claude Code reads ANTHROPIC_BASE_URL, as the Anthropic SDK does: the variable alone routes it."""
    import anthropic

    name, value = re.fullmatch(r"export (\w+)=(\S+)", SNIPPETS["claude-code"]).groups()
    monkeypatch.setenv(name, value.replace("http://127.0.0.1:8000", proxy.url))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    client = anthropic.Anthropic(max_retries=0)
    tools = [{"name": n, "input_schema": {"type": "object"}} for n in ("Read", "execute_command")]
    client.messages.create(
        model="small-model", max_tokens=50, messages=[{"role": "user", "content": "hi"}], tools=tools
    )
    assert offered(upstream.messages_requests[-1]) == ["Read"]
