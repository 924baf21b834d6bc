"""The bundled local model, served by llama-cpp-python, answers the OpenAI client.

What the server does with each request shape is in docs/local-model-notes.md.
"""

from __future__ import annotations

import json

import openai
import pytest
from local_model import local_server  # noqa: F401 - first: skips (or fails) without the model
from sample_tools import WEATHER_TOOL

from gatekeeper.measuring.localmodel import LocalModelServer

pytestmark = pytest.mark.local_model


@pytest.fixture(scope="module")
def client(local_server: LocalModelServer) -> openai.OpenAI:  # noqa: F811
    return openai.OpenAI(base_url=local_server.base_url, api_key="local", max_retries=0, timeout=120)


def test_server_lists_its_model(local_server: LocalModelServer, client: openai.OpenAI) -> None:  # noqa: F811
    assert local_server.base_url.endswith("/v1")
    assert [m.id for m in client.models.list().data] == [local_server.model]


def test_plain_chat_completion_returns_text(local_server: LocalModelServer, client: openai.OpenAI) -> None:  # noqa: F811
    response = client.chat.completions.create(
        model=local_server.model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=32,
    )
    choice = response.choices[0]
    assert isinstance(choice.message.content, str) and choice.message.content.strip()
    assert response.usage is not None and response.usage.completion_tokens > 0
    assert choice.finish_reason in {"stop", "length"}


SYSTEM = {"role": "system", "content": "You are a helpful assistant. Use a function when one fits the request."}


def asking_with_tool(
    client: openai.OpenAI, model: str, question: str, tool: dict, max_tokens: int
) -> openai.types.chat.ChatCompletion:
    """One question with one tool offered, as llama.cpp's tool calling needs it: tool_choice auto,
    the tools shown inside a system message (docs/local-model-notes.md)."""
    return client.chat.completions.create(
        model=model,
        messages=[SYSTEM, {"role": "user", "content": question}],
        tools=[tool],
        tool_choice="auto",
        temperature=0,
        max_tokens=max_tokens,
    )


def test_auto_tool_choice_with_system_message_calls_the_tool(
    local_server: LocalModelServer,  # noqa: F811 - the fixture, imported from local_model
    client: openai.OpenAI,
) -> None:
    # chatml-function-calling shows the tools to the model only inside a system message,
    # and ignores `tools` altogether unless tool_choice is set.
    response = asking_with_tool(client, local_server.model, "What is the weather in Paris?", WEATHER_TOOL, 64)
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls, choice.message
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict)
    assert "paris" in str(arguments.get("city", "")).lower()


WRITE_TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "description": "Write text to a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    },
}


def test_a_tool_call_stops_at_the_requests_max_tokens(
    local_server: LocalModelServer,  # noqa: F811 - the fixture, imported from local_model
    client: openai.OpenAI,
) -> None:
    # llama-cpp-python writes a call's arguments with max_tokens=None; gatekeeper.measuring.llama_server
    # passes the request's bound on (unbounded, this call writes 38 tokens of arguments).
    essay = "Write a long essay of 500 words about the history of Paris into the file paris.txt."
    response = asking_with_tool(client, local_server.model, essay, WRITE_TOOL, 8)
    assert response.usage is not None and response.usage.completion_tokens <= 8, response.usage
    calls = response.choices[0].message.tool_calls or []
    assert [c.function.name for c in calls] == ["write_file"]
    with pytest.raises(ValueError):
        json.loads(calls[0].function.arguments)  # cut short: no closing brace
