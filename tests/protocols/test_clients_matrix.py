"""The cells of the client matrix of docs/frameworks.md no other test drives: each real client in its default
mode, through the real proxy (native upstream, and translated where the protocol applies) and
in process (the wrapper that fits it), against a real scripted upstream whose model calls a
hidden tool next to an allowed one. The hidden tool never reaches the upstream, its call never
reaches the client's tool execution, and under `blocked_calls: explain` (the default) the
client's agent loop goes on to its final answer.

openai-node is driven by tests/js/openai_node.mjs (npm `openai`, pinned in tests/js/package.json).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled price map

import anthropic
import httpx
import openai
import pytest
from conftest import ROOT, Proxy, make_profile, seed_store, settings_for, small_model_proxy
from upstreams import NativeServer

from gatekeeper import Gatekeeper, gating_http_client
from gatekeeper.adapters import anthropic_sdk, openai_sdk
from gatekeeper.rules.tiers import Tier

JS = ROOT / "tests" / "js"
NAMES = ("read_file", "write_file", "execute_command")  # small, medium, large under settings_for
PATH = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
CHAT_TOOLS = [{"type": "function", "function": {"name": n, "parameters": PATH}} for n in NAMES]
RESPONSES_TOOLS = [{"type": "function", "name": n, "parameters": PATH} for n in NAMES]
HI = [{"role": "user", "content": "read a.txt"}]
# The model's first turn: some text, a call to the hidden tool and one to the allowed tool.
BOTH = {
    "content": "on it",
    "tool_calls": [
        {"name": "execute_command", "arguments": {"path": "rm -rf /"}},
        {"name": "read_file", "arguments": {"path": "a.txt"}},
    ],
}
FINAL = "the file says hello"
EXPLAINED = "A call to the tool `execute_command` was removed: it needs tier large"


def agent_turns(body: dict) -> dict:
    """Call both tools first; once a tool's result is back (any protocol), give the final answer."""
    text = json.dumps(body.get("messages") or body.get("input"))
    if '"role": "tool"' in text or "function_call_output" in text or "tool_result" in text:
        return {"content": FINAL}
    return BOTH


def offered(body: dict) -> list[str]:
    return [t.get("name") or t["function"]["name"] for t in body.get("tools", [])]


def only_the_allowed_tool_was_offered(upstream: NativeServer) -> None:
    bodies = upstream.received()
    assert bodies and all(offered(b) == ["read_file"] for b in bodies), [offered(b) for b in bodies]


def recorder(ran: list[str]) -> Callable[[str], Callable[..., str]]:
    """Tool bodies that record their name when a framework runs them."""

    def body(name: str) -> Callable[..., str]:
        def run(path: str) -> str:
            ran.append(name)
            return "hello"

        run.__name__ = name
        run.__doc__ = f"The {name} tool."
        return run

    return body


@pytest.fixture(params=["native", "chat-only"])
def mode(request) -> str:
    return request.param


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer(agent_turns) as server:
        yield server


@pytest.fixture
def proxy(upstream, mode, store_path, default_suite) -> Iterator[Proxy]:
    """The proxy in its default answer mode (`explain`), the upstream native or chat-only."""
    protocols = ["chat", "responses", "messages"] if mode == "native" else ["chat"]
    settings = {"base_url": upstream.base_url, "protocols": protocols}
    with small_model_proxy(
        upstream.base_url, store_path, default_suite, upstream=settings, blocked_calls="explain"
    ) as p:
        yield p


@pytest.fixture
def gk(upstream, store_path, default_suite) -> Iterator[Gatekeeper]:
    """In process, no proxy: small-model measured small, `explain`."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    gatekeeper = Gatekeeper(settings_for(upstream.base_url, store_path, blocked_calls="explain"))
    yield gatekeeper
    gatekeeper.close()


# -- openai-node (npm `openai`) through the proxy ----------------------------------------------


@pytest.fixture(scope="module")
def node_modules() -> Path:
    if not (JS / "node_modules" / "openai").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=600, capture_output=True)
    return JS / "node_modules"


def node(script: str, *args: str) -> dict:
    done = subprocess.run(["node", script, *args], cwd=JS, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_openai_node_sees_only_the_allowed_call(node_modules, proxy, upstream):
    seen = node("openai_node.mjs", proxy.url, "small-model")
    for case in ("chat", "chatStream", "responses", "responsesStream"):
        assert seen[case]["calls"] == ["read_file"], case
        assert seen[case]["text"].startswith("on it") and EXPLAINED in seen[case]["text"], case
    # its own agent loop had a function for every tool, and ran only the allowed one
    assert seen["runTools"] == {"final": FINAL, "ran": ["read_file"]}
    only_the_allowed_tool_was_offered(upstream)


# -- the Anthropic SDK's own agent loop (beta tool runner) through the proxy -------------------
# In process it is refused (the wrapper cannot see the tools it sends); through the proxy it runs
# gated. By default it keeps the conversation on the server (`thread`): each later turn sends only
# its new messages, and no tools.


def tool_runner(proxy: Proxy, ran: list[str], **options: Any) -> Any:
    tools = [anthropic.beta_tool(recorder(ran)(n)) for n in NAMES]
    client = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    return client.beta.messages.tool_runner(
        model="small-model", max_tokens=100, messages=HI, tools=tools, max_iterations=4, **options
    )


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_tool_runner_without_a_thread_runs_only_the_allowed_call(proxy, upstream, stream):
    ran: list[str] = []
    final = tool_runner(proxy, ran, stream=stream, thread=False).until_done()
    assert ran == ["read_file"] and [block.text for block in final.content] == [FINAL]
    only_the_allowed_tool_was_offered(upstream)


def test_anthropic_tool_runner_in_a_thread_keeps_no_call_of_a_turn_that_offered_no_tool(proxy, upstream, mode):
    """The model calls both tools every turn. The first turn offers the gated tools; a continued
    turn offers none (the server holds the thread's, which a higher tier, or this model before a
    demotion, may have given it), so none of its calls is kept. A chat-only upstream keeps no
    thread: the first turn is a 400 naming it."""
    upstream.responder = lambda body: BOTH
    ran: list[str] = []
    if mode == "chat-only":
        with pytest.raises(anthropic.BadRequestError, match="'thread' needs server-side state"):
            tool_runner(proxy, ran).until_done()
        assert ran == [] and upstream.received() == []
        return
    final = tool_runner(proxy, ran).until_done()
    first, continued = upstream.messages_requests
    assert offered(first) == ["read_file"] and first["thread"] == {"type": "create"}
    assert "tools" not in continued and continued["thread"]["type"] == "continue"
    assert ran == ["read_file"]  # the first turn's call, once
    text = " ".join(block.text for block in final.content)
    assert "`read_file` was removed: this request did not offer it" in text and EXPLAINED in text


# -- the Vercel AI SDK, translated (its native runs: tests/protocols/test_protocol_vercel.py) ---


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_vercel_ai_sdk_through_a_chat_only_upstream(node_modules, upstream, store_path, default_suite, provider):
    settings = {"base_url": upstream.base_url, "protocols": ["chat"]}
    with small_model_proxy(
        upstream.base_url, store_path, default_suite, upstream=settings, blocked_calls="explain"
    ) as p:
        seen = node("vercel_ai.mjs", p.url, "small-model", provider)
    assert seen["toolCalls"] == seen["ran"] == ["read_file"]
    assert seen["text"].startswith("on it") and EXPLAINED in seen["text"]
    assert upstream.responses_requests == upstream.messages_requests == []  # translated to chat
    only_the_allowed_tool_was_offered(upstream)


# -- LangGraph's prebuilt agent over LangChain chat models ------------------------------------


def langgraph_agent(llm: Any) -> tuple[Any, list[str]]:
    """LangGraph's ReAct agent with the three tools, and the list of the tools it ran."""
    from langchain_core.tools import StructuredTool
    from langgraph.prebuilt import create_react_agent

    ran: list[str] = []
    tools = [StructuredTool.from_function(recorder(ran)(n)) for n in NAMES]
    with warnings.catch_warnings():  # langgraph 1.x points at langchain.agents.create_agent, the same loop
        warnings.simplefilter("ignore", DeprecationWarning)
        return create_react_agent(llm, tools), ran


ASK = ({"messages": [("user", "read a.txt")]}, {"recursion_limit": 8})


def run_langgraph(llm: Any) -> tuple[Any, list[str]]:
    """The agent run once; its final state and what ran."""
    graph, ran = langgraph_agent(llm)
    return graph.invoke(*ASK), ran


def the_graph_completed(state: Any, ran: list[str]) -> None:
    assert ran == ["read_file"]
    assert [m.name for m in state["messages"] if m.type == "tool"] == ["read_file"]
    assert state["messages"][-1].type == "ai" and state["messages"][-1].text == FINAL


@pytest.mark.parametrize("model_kind", ["chat", "responses", "anthropic"])
def test_langgraph_agent_through_the_proxy(proxy, upstream, mode, model_kind):
    from langchain_anthropic import ChatAnthropic
    from langchain_openai import ChatOpenAI

    if model_kind == "anthropic":
        llm = ChatAnthropic(model="small-model", base_url=proxy.url, api_key="k", max_retries=0)
    else:
        llm = ChatOpenAI(
            model="small-model",
            base_url=proxy.url + "/v1",
            api_key="k",
            max_retries=0,
            use_responses_api=model_kind == "responses" or None,  # None: ChatOpenAI's default, chat
        )
    the_graph_completed(*run_langgraph(llm))
    only_the_allowed_tool_was_offered(upstream)


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
@pytest.mark.parametrize("model_kind", ["chat", "responses"])
async def test_langgraph_agent_in_process_with_gating_http_clients(upstream, gk, model_kind, run):
    """ChatOpenAI takes the SDK's HTTP clients, one per side: gatekeeper's gate every request and
    answer in them (hand both: a side left out uses LangChain's own, ungated)."""
    from langchain_openai import ChatOpenAI

    llm = ChatOpenAI(
        model="small-model",
        base_url=upstream.base_url,
        api_key="k",
        max_retries=0,
        use_responses_api=model_kind == "responses" or None,
        http_client=gating_http_client(gk, httpx.Client(timeout=30), is_async=False),
        http_async_client=gating_http_client(gk, httpx.AsyncClient(timeout=30), is_async=True),
    )
    graph, ran = langgraph_agent(llm)
    state = graph.invoke(*ASK) if run == "invoke" else await graph.ainvoke(*ASK)
    the_graph_completed(state, ran)
    only_the_allowed_tool_was_offered(upstream)


# -- litellm (the library) as a client of the proxy ----------------------------------------


def test_litellm_completion_through_the_proxy(proxy, upstream):
    import litellm

    where = {"model": "openai/small-model", "api_base": proxy.url + "/v1", "api_key": "k", "max_retries": 0}
    answer = litellm.completion(messages=HI, tools=CHAT_TOOLS, **where)
    message = answer.choices[0].message
    assert [c.function.name for c in message.tool_calls] == ["read_file"] and EXPLAINED in message.content
    chunks = list(litellm.completion(messages=HI, tools=CHAT_TOOLS, stream=True, **where))
    streamed = litellm.stream_chunk_builder(chunks, messages=HI).choices[0].message
    assert [c.function.name for c in streamed.tool_calls] == ["read_file"] and EXPLAINED in streamed.content
    only_the_allowed_tool_was_offered(upstream)


def test_litellm_responses_through_the_proxy(proxy, upstream):
    import litellm

    answer = litellm.responses(
        model="openai/small-model", api_base=proxy.url + "/v1", api_key="k", input="read a.txt", tools=RESPONSES_TOOLS
    )
    calls = [item.name for item in answer.output if item.type == "function_call"]
    text = "".join(part.text for item in answer.output if item.type == "message" for part in item.content)
    assert calls == ["read_file"] and EXPLAINED in text
    only_the_allowed_tool_was_offered(upstream)


@pytest.mark.parametrize("stream", [False, True])
def test_litellm_completion_of_an_anthropic_model_through_the_proxy(proxy, upstream, mode, stream):
    """litellm speaks Messages to an `anthropic/` model: the proxy's /v1/messages."""
    import litellm

    where = {"model": "anthropic/small-model", "api_base": proxy.url, "api_key": "k", "max_retries": 0}
    answer = litellm.completion(messages=HI, tools=CHAT_TOOLS, max_tokens=100, stream=stream, **where)
    message = (litellm.stream_chunk_builder(list(answer), messages=HI) if stream else answer).choices[0].message
    assert [c.function.name for c in message.tool_calls] == ["read_file"] and EXPLAINED in message.content
    sent = upstream.messages_requests if mode == "native" else upstream.requests  # chat-only: translated
    assert sent and len(sent) == len(upstream.received())
    only_the_allowed_tool_was_offered(upstream)


# -- a LiteLLM proxy with gatekeeper's hook, the official clients ----------------------------------
# (chat, and the request side of every protocol: test_protocol_litellm_proxy.py, test_hostile_round6.py)

ALLOWED_ONLY = {"content": "only", "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}
CLAUDE_TOOLS = [{"name": n, "input_schema": PATH} for n in NAMES]


@pytest.fixture(scope="module")
def litellm_proxy(tmp_path_factory, default_suite) -> Iterator[tuple[str, str, NativeServer]]:
    from serving import litellm_example

    with litellm_example(tmp_path_factory.mktemp("litellm"), default_suite, lambda body: BOTH) as served:
        yield served


@pytest.fixture
def litellm_clients(litellm_proxy) -> Iterator[tuple[openai.OpenAI, anthropic.Anthropic, NativeServer]]:
    url, key, server = litellm_proxy
    server.responder = lambda body: BOTH
    yield (
        openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60),
        anthropic.Anthropic(base_url=url, api_key=key, max_retries=0, timeout=60),
        server,
    )


def test_litellm_proxy_keeps_the_allowed_call_of_a_responses_and_a_messages_answer(litellm_clients):
    """LiteLLM's Responses route hands the post-call hook a copy of the request: the hook found no
    gate for it, and removed every call, the allowed one too."""
    client, claude, _ = litellm_clients
    response = client.responses.create(model="local-model", input="read a.txt", tools=RESPONSES_TOOLS)
    assert [item.name for item in response.output if item.type == "function_call"] == ["read_file"]
    message = claude.messages.create(model="local-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS)
    assert [block.name for block in message.content if block.type == "tool_use"] == ["read_file"]


def test_litellm_proxy_streams_an_allowed_call_to_every_client(litellm_clients):
    client, claude, server = litellm_clients
    server.responder = lambda body: ALLOWED_ONLY
    with client.chat.completions.stream(model="local-model", messages=HI, tools=CHAT_TOOLS) as chat:
        calls = chat.get_final_completion().choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["read_file"]
    with client.responses.stream(model="local-model", input="read a.txt", tools=RESPONSES_TOOLS) as events:
        output = events.get_final_response().output
    assert [item.name for item in output if item.type == "function_call"] == ["read_file"]
    with claude.messages.stream(model="local-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS) as blocks:
        content = blocks.get_final_message().content
    assert [block.name for block in content if block.type == "tool_use"] == ["read_file"]


def test_litellm_proxy_streams_a_hidden_call_removed_and_explained_to_every_client(litellm_clients):
    """The model calls the hidden tool next to the allowed one in a streamed answer: each official
    client reads a finished stream with the allowed call and the explanation in place of the
    hidden one, as gatekeeper's own proxy answers (issue 43: the hook raised inside LiteLLM's
    stream, which the clients saw as a broken connection, and retried)."""
    client, claude, _ = litellm_clients
    with client.chat.completions.stream(model="local-model", messages=HI, tools=CHAT_TOOLS) as chat:
        message = chat.get_final_completion().choices[0]
    assert [c.function.name for c in message.message.tool_calls or []] == ["read_file"]
    assert EXPLAINED in (message.message.content or "") and message.finish_reason == "tool_calls"
    with client.responses.stream(model="local-model", input="read a.txt", tools=RESPONSES_TOOLS) as events:
        response = events.get_final_response()
    assert [item.name for item in response.output if item.type == "function_call"] == ["read_file"]
    assert EXPLAINED in response.output_text and response.status == "completed"
    with claude.messages.stream(model="local-model", max_tokens=100, messages=HI, tools=CLAUDE_TOOLS) as blocks:
        final = blocks.get_final_message()
    assert [block.name for block in final.content if block.type == "tool_use"] == ["read_file"]
    assert any(EXPLAINED in block.text for block in final.content if block.type == "text")
    assert final.stop_reason == "tool_use"


# -- agent frameworks streaming through the proxy ------------------------------------------------


async def test_agents_sdk_streamed_run_through_the_proxy(proxy, upstream):
    """`Runner.run_streamed` with the SDK's default model class (Responses), streamed events."""
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # traces would be exported to OpenAI
    ran: list[str] = []
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", max_retries=0)
    agent = Agent(
        name="a",
        model=OpenAIResponsesModel("small-model", client),
        tools=[function_tool(recorder(ran)(n)) for n in NAMES],
    )
    result = Runner.run_streamed(agent, "read a.txt")
    async for _ in result.stream_events():
        pass
    assert result.final_output == FINAL and ran == ["read_file"]
    assert all(body["stream"] is True for body in upstream.received())
    only_the_allowed_tool_was_offered(upstream)


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_pydantic_ai_streamed_run_through_the_proxy(proxy, upstream, kind):
    """An `event_stream_handler` makes pydantic-ai stream every model request."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=proxy.url + "/v1", api_key="k")
    model = (OpenAIChatModel if kind == "chat" else OpenAIResponsesModel)("small-model", provider=provider)
    ran: list[str] = []
    events: list[Any] = []

    async def handler(context: Any, stream: Any) -> None:
        events.extend([event async for event in stream])

    result = await Agent(model, tools=[recorder(ran)(n) for n in NAMES]).run("read a.txt", event_stream_handler=handler)
    assert result.output == FINAL and ran == ["read_file"] and events
    assert all(body["stream"] is True for body in upstream.received())
    only_the_allowed_tool_was_offered(upstream)


# -- agent frameworks in process, handed a gated client, the model calling the hidden tool ----


def gated_openai(upstream: NativeServer, gk: Gatekeeper) -> openai.AsyncOpenAI:
    return openai_sdk.gate_client(openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)


@pytest.mark.parametrize("kind", ["chat", "responses"])
async def test_agents_sdk_in_process_runs_only_the_allowed_call(upstream, gk, kind):
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )

    set_tracing_disabled(True)  # traces would be exported to OpenAI
    ran: list[str] = []
    model_class = OpenAIChatCompletionsModel if kind == "chat" else OpenAIResponsesModel
    model = model_class(model="small-model", openai_client=gated_openai(upstream, gk))
    agent = Agent(name="a", model=model, tools=[function_tool(recorder(ran)(n)) for n in NAMES])
    assert (await Runner.run(agent, "read a.txt")).final_output == FINAL
    assert ran == ["read_file"]
    only_the_allowed_tool_was_offered(upstream)


@pytest.mark.parametrize("kind", ["chat", "responses", "anthropic"])
async def test_pydantic_ai_in_process_runs_only_the_allowed_call(upstream, gk, kind):
    from pydantic_ai import Agent
    from pydantic_ai.models.anthropic import AnthropicModel
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.anthropic import AnthropicProvider
    from pydantic_ai.providers.openai import OpenAIProvider

    if kind == "anthropic":
        claude = anthropic.AsyncAnthropic(base_url=upstream.base_url.removesuffix("/v1"), api_key="x", max_retries=0)
        provider = AnthropicProvider(anthropic_client=anthropic_sdk.gate_client(claude, gk))
        model: Any = AnthropicModel("small-model", provider=provider)
    else:
        model_class = OpenAIChatModel if kind == "chat" else OpenAIResponsesModel
        model = model_class("small-model", provider=OpenAIProvider(openai_client=gated_openai(upstream, gk)))
    ran: list[str] = []
    agent = Agent(model, tools=[recorder(ran)(n) for n in NAMES])
    assert (await agent.run("read a.txt")).output == FINAL
    assert ran == ["read_file"]
    only_the_allowed_tool_was_offered(upstream)


# -- the frameworks page's matrix (docs/frameworks.md) names tests that exist -------------------------------------------------


def test_every_test_the_frameworks_page_matrix_names_exists():
    readme = (ROOT / "docs/frameworks.md").read_text()
    table = readme.split("**Which test drives each client.**", 1)[1].split("\n\n", 2)[1]
    named: list[tuple[str, str]] = []
    for row in table.splitlines()[2:]:
        path = ""
        for file, test in re.findall(r"`(?:([\w/]+\.py))?(?:::(\w+))?`", row):
            path = file or path
            if path:
                named.append((path, test))
    assert len({test for _, test in named if test}) >= 20, named
    for path, test in named:
        source = (ROOT / "tests" / path).read_text()
        assert not test or re.search(rf"^(async )?def {test}\(", source, re.M), f"tests/{path}::{test}"
