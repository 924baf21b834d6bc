"""Chat translation for chat-only upstreams: gatekeeper's own codecs against litellm's bridges.

    python tests/perf/translation.py

Times one request translation (client protocol -> chat) and one answer translation (chat ->
client protocol) per library on the same representative request (instructions, a tool-call
history, three function tools, effort) and answer (text + one tool call), and prints where the
two disagree on what matters to gatekeeper (tools, tool choice, effort, calls). litellm's
streaming bridges are not timed: they run only inside litellm's own stream wrapper
(CustomStreamWrapper over a provider response), not on a chat SSE stream we parse.
"""

from __future__ import annotations

import json
import os
import sys
import timeit
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from litellm.llms.anthropic.messages.adapters.transformation import LiteLLMAnthropicMessagesAdapter
from litellm.responses.litellm_completion_transformation.transformation import (
    LiteLLMCompletionResponsesConfig as LiteResponses,
)
from litellm.types.utils import ModelResponse

from gatekeeper.protocols.messages import translate as translate_messages
from gatekeeper.protocols.responses import translate as translate_responses

TOOLS = [
    {
        "type": "function",
        "name": n,
        "description": f"the {n} tool",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
    for n in ("read_file", "write_file", "list_dir")
]
RESPONSES = {
    "model": "m",
    "instructions": "be brief",
    "reasoning": {"effort": "low"},
    "tools": TOOLS,
    "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "read_file"}]},
    "input": [
        {"role": "user", "content": "read a"},
        {"type": "function_call", "call_id": "c1", "name": "read_file", "arguments": '{"path": "a"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "data"},
        {"role": "user", "content": "now b"},
    ],
}
MESSAGES = {
    "model": "m",
    "max_tokens": 100,
    "system": "be brief",
    "output_config": {"effort": "low"},
    "tools": [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS],
    "tool_choice": {"type": "any"},
    "messages": [
        {"role": "user", "content": "read a"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "a"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "data"},
                {"type": "text", "text": "now b"},
            ],
        },
    ],
}
CHAT = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "finish_reason": "tool_calls",
            "message": {
                "role": "assistant",
                "content": "reading",
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"path": "b"}'},
                    }
                ],
            },
        }
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38},
}


def per_call_us(fn, n: int = 2000) -> float:
    return min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6


def main() -> None:
    options = {k: v for k, v in RESPONSES.items() if k not in ("model", "input")}
    lite_anthropic = LiteLLMAnthropicMessagesAdapter()
    rows = [
        (
            "responses request -> chat",
            lambda: translate_responses.to_chat(RESPONSES),
            lambda: LiteResponses.transform_responses_api_request_to_chat_completion_request(
                model="m", input=RESPONSES["input"], responses_api_request=options, custom_llm_provider="openai"
            ),
        ),
        (
            "chat answer -> responses",
            lambda: translate_responses.from_chat(CHAT, RESPONSES),
            lambda: LiteResponses.transform_chat_completion_response_to_responses_api_response(
                request_input=RESPONSES["input"], responses_api_request=options, chat_completion_response=dict(CHAT)
            ),
        ),
        (
            "messages request -> chat",
            lambda: translate_messages.to_chat(MESSAGES),
            lambda: lite_anthropic.translate_anthropic_to_openai(MESSAGES),
        ),
        (
            "chat answer -> messages",
            lambda: translate_messages.from_chat(CHAT, MESSAGES),
            lambda: lite_anthropic.translate_openai_response_to_anthropic(ModelResponse(**CHAT)),
        ),
    ]
    print(f"{'translation':28} {'gatekeeper µs':>14} {'litellm µs':>11}")
    for name, ours, theirs in rows:
        print(f"{name:28} {per_call_us(ours):14.1f} {per_call_us(theirs, 500):11.1f}")

    print("\nwhat litellm's bridges send a chat-only upstream:")
    lite = LiteResponses.transform_responses_api_request_to_chat_completion_request(
        model="m", input=RESPONSES["input"], responses_api_request=options, custom_llm_provider="openai"
    )
    print(
        "  responses tool_choice:",
        json.dumps(lite.get("tool_choice")),
        "| ours:",
        json.dumps(translate_responses.to_chat(RESPONSES).get("tool_choice")),
        "| ours offers:",
        [t["function"]["name"] for t in translate_responses.to_chat(RESPONSES)["tools"]],
    )
    print(
        "  responses extra keys:",
        sorted(set(lite) - {"messages", "model", "tools", "tool_choice", "reasoning_effort", "stream"}),
    )
    lite_m = lite_anthropic.translate_anthropic_to_openai(MESSAGES)[0]
    print(
        "  messages reasoning_effort:",
        lite_m.get("reasoning_effort"),
        "| ours:",
        translate_messages.to_chat(MESSAGES).get("reasoning_effort"),
    )


if __name__ == "__main__":
    main()
