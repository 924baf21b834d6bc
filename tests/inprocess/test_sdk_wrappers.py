"""The in-process SDK wrappers (`gatekeeper.adapters.openai_sdk`, `.anthropic_sdk`) as agent
frameworks use them: each framework is handed a gated client and runs one request with tools
against a real scripted upstream speaking its protocol. The frameworks pass the SDKs' "not given"
markers for every field they leave unset; the wrappers strip them before gating."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from conftest import ROOT
from upstreams import NativeServer

from gatekeeper.adapters import anthropic_sdk, openai_sdk

HI = [{"role": "user", "content": "hi"}]
# Under the `gk` fixture's rules: read_file is small, write_file medium, execute_command large.
CHAT_TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
    for n in ("read_file", "write_file", "execute_command")
]
RESPONSES_TOOLS = [
    {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
    for n in ("read_file", "write_file", "execute_command")
]
MESSAGES_TOOLS = [
    {"name": n, "input_schema": {"type": "object", "properties": {}}}
    for n in ("read_file", "write_file", "execute_command")
]


@pytest.fixture
def upstream() -> Iterator[NativeServer]:  # replaces conftest's chat-only one; the `gk` fixture uses it
    with NativeServer() as server:
        yield server


def offered(body: dict) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def read_file(path: str) -> str:
    """Read a file."""
    return "hello"


def write_file(path: str) -> str:
    """Write a file."""
    return "written"


def execute_command(command: str) -> str:
    """Run a command."""
    return "ran"


TOOLS = [read_file, write_file, execute_command]


def gated_openai(upstream: NativeServer, gk) -> openai.AsyncOpenAI:
    return openai_sdk.gate_client(openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)


def gated_anthropic(upstream: NativeServer, gk) -> anthropic.AsyncAnthropic:
    client = anthropic.AsyncAnthropic(base_url=upstream.base_url.removesuffix("/v1"), api_key="x", max_retries=0)
    return anthropic_sdk.gate_client(client, gk)


# -- the frameworks -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_openai_agents_sdk_with_a_gated_client(upstream, gk, kind):
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)
    model_class = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
    model = model_class(model="small-model", openai_client=gated_openai(upstream, gk))
    agent = Agent(name="a", model=model, tools=[function_tool(f) for f in TOOLS])
    assert (await Runner.run(agent, "hi")).final_output == "ok"
    sent = upstream.requests if kind == "chat" else upstream.responses_requests
    assert offered(sent[-1]) == ["read_file"]


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_pydantic_ai_openai_models_with_a_gated_client(upstream, gk, kind):
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model_class = OpenAIChatModel if kind == "chat" else OpenAIResponsesModel
    model = model_class("small-model", provider=OpenAIProvider(openai_client=gated_openai(upstream, gk)))
    assert (await Agent(model, tools=TOOLS).run("hi")).output == "ok"
    sent = upstream.requests if kind == "chat" else upstream.responses_requests
    assert offered(sent[-1]) == ["read_file"]


async def test_pydantic_ai_anthropic_model_with_a_gated_client(upstream, gk):
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.providers.anthropic import AnthropicProvider

    model = AnthropicModel("small-model", provider=AnthropicProvider(anthropic_client=gated_anthropic(upstream, gk)))
    assert (await Agent(model, tools=TOOLS).run("hi")).output == "ok"
    assert offered(upstream.messages_requests[-1]) == ["read_file"]


# -- the markers, field by field ------------------------------------------------------------


@pytest.mark.parametrize("marker", [openai.NOT_GIVEN, openai.omit])
async def test_openai_markers_in_every_field_are_stripped_before_gating(upstream, gk, marker):
    client = gated_openai(upstream, gk)
    await client.chat.completions.create(
        model="effortful",
        messages=HI,
        tools=CHAT_TOOLS,
        tool_choice=marker,
        reasoning_effort=marker,  # not given: the pair is effortful@default (unmeasured, small)
        temperature=marker,
        parallel_tool_calls=marker,
        stream_options=marker,
        metadata={"run": "1", "skipped": marker},
    )
    sent = upstream.requests[-1]
    assert offered(sent) == ["read_file"]
    assert "reasoning_effort" not in sent and "tool_choice" not in sent and sent["metadata"] == {"run": "1"}
    await client.responses.create(
        model="effortful", input="hi", tools=RESPONSES_TOOLS, reasoning={"effort": "xhigh", "summary": marker}
    )
    assert offered(upstream.responses_requests[-1]) == ["read_file", "write_file", "execute_command"]
    await client.responses.create(model="effortful", input="hi", tools=RESPONSES_TOOLS, reasoning=marker, store=marker)
    assert offered(upstream.responses_requests[-1]) == ["read_file"]


@pytest.mark.parametrize("marker", [anthropic.NOT_GIVEN, anthropic.omit])
async def test_anthropic_markers_in_every_field_are_stripped_before_gating(upstream, gk, marker):
    client = gated_anthropic(upstream, gk)
    await client.messages.create(
        model="medium-model",
        max_tokens=32,
        messages=HI,
        tools=MESSAGES_TOOLS,
        tool_choice=marker,
        thinking=marker,
        output_config=marker,
        temperature=marker,
        metadata=marker,
    )
    sent = upstream.messages_requests[-1]
    assert offered(sent) == ["read_file", "write_file"]
    assert not {"thinking", "output_config", "temperature", "metadata", "tool_choice"} & set(sent)


def test_only_the_sdks_own_markers_are_taken_for_not_given():
    from gatekeeper.adapters._sdk import given, is_sentinel

    class Omit:  # same name, not an SDK's
        pass

    assert is_sentinel(openai.omit) and is_sentinel(anthropic.NOT_GIVEN)
    assert not is_sentinel(Omit()) and not is_sentinel(None)
    mine = Omit()
    assert given({"a": [1, openai.omit, {"b": anthropic.omit, "c": mine}]}) == {"a": [1, {"c": mine}]}


# -- the adapters' imports ------------------------------------------------------------------


def test_the_adapters_use_only_gatekeepers_public_api():
    """Every gatekeeper import in adapters/ is `gatekeeper` itself (the public API) or another
    adapter module."""
    for path in sorted((ROOT / "adapters").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("gatekeeper"):
                assert node.module == "gatekeeper" or node.module.startswith("gatekeeper.adapters"), (
                    f"{path.name}: from {node.module} import ..."
                )
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("gatekeeper.") or alias.name.startswith("gatekeeper.adapters")


BLOCK_OPENAI = """
import sys

class BlockOpenAI:
    def find_spec(self, name, path=None, target=None):
        if name == "openai" or name.startswith("openai."):
            raise ImportError(f"{name} is blocked: the Anthropic adapter must not need it")
        return None

sys.meta_path.insert(0, BlockOpenAI())
import anthropic
from gatekeeper.adapters.anthropic_sdk import gate_client
from gatekeeper import Gatekeeper, Settings


client = gate_client(anthropic.Anthropic(api_key="x"), Gatekeeper(Settings(store=sys.argv[1])))
assert "openai" not in sys.modules, sorted(m for m in sys.modules if m.startswith("openai"))
print("ok")
"""


def test_the_anthropic_adapter_works_without_the_openai_sdk(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-c", BLOCK_OPENAI, str(tmp_path / "store.json")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
