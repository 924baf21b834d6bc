"""One Responses API request and one Messages API request through gatekeeper, with the agent
tools of examples/local_demo.py: for a chat-only upstream (the local model) the proxy translates
both to Chat Completions and back, and gates them like the chat request.

    from protocol_requests import send_protocol_requests
    for line in send_protocol_requests(proxy_url, model, AGENT_TOOLS, AGENT_MESSAGES):
        print(line)

Plain (not streamed) requests: llama.cpp's server breaks off a stream in which the model picks
a tool (docs/local-model-notes.md), which the proxy reports as an error event, correctly.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai


def send_protocol_requests(
    proxy_url: str, model: str, tools: list[dict[str, Any]], messages: list[dict[str, Any]], timeout: float = 600
) -> list[str]:
    """`tools` in Chat Completions form, `messages` a system then a user message; one line each."""
    system, user = messages[0]["content"], messages[1]["content"]
    functions = [t["function"] for t in tools]

    client = openai.OpenAI(base_url=f"{proxy_url}/v1", api_key="demo-agent", max_retries=0, timeout=timeout)
    raw = client.responses.with_raw_response.create(
        model=model,
        instructions=system,
        input=user,
        tools=[{"type": "function", **f} for f in functions],
        tool_choice="auto",
        temperature=0,
        max_output_tokens=128,
    )
    response = raw.parse()
    calls = [f"{i.name}({i.arguments})" for i in response.output if i.type == "function_call"]
    lines = [_line("Responses API (POST /v1/responses)", raw.headers, calls, response.output_text)]

    claude = anthropic.Anthropic(base_url=proxy_url, api_key="demo-agent", max_retries=0, timeout=timeout)
    raw = claude.messages.with_raw_response.create(
        model=model,
        system=system,
        messages=[{"role": "user", "content": user}],
        max_tokens=128,
        tools=[
            {"name": f["name"], "description": f["description"], "input_schema": f["parameters"]} for f in functions
        ],
        tool_choice={"type": "auto"},
    )
    message = raw.parse()
    calls = [f"{b.name}({b.input})" for b in message.content if b.type == "tool_use"]
    text = "".join(b.text for b in message.content if b.type == "text")
    lines.append(_line("Messages API (POST /v1/messages)", raw.headers, calls, text))
    return lines


def _line(api: str, headers: Any, calls: list[str], text: str) -> str:
    blocked = headers.get("x-gatekeeper-blocked-calls")
    answer = "; ".join(calls) if calls else repr(text)
    return (
        f"{api}: tier {headers.get('x-gatekeeper-tier')} ({headers.get('x-gatekeeper-profile')}), "
        f"answer: {answer}" + (f", calls removed: {blocked}" if blocked else "")
    )
