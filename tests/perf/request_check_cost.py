"""What the request gate costs per request: each codec's `gate` (every field checked against
protocols/<protocol>/fields.py, nested objects included, and the tools gated) on a long agent turn.

    python tests/perf/request_check_cost.py [--turns 20] [--calls 2000]

The bodies are what agents send after a few turns: a system prompt, user messages with text and
image parts, earlier tool calls and their results, ten function tools. Prints the median and p99
microseconds per `gate` call, per protocol. Run it on two checkouts (PYTHONPATH=<checkout>) to
compare them. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from typing import Any

from gatekeeper.protocols.chat.codec import CODEC as CHAT
from gatekeeper.protocols.messages.codec import CODEC as MESSAGES
from gatekeeper.protocols.responses.codec import CODEC as RESPONSES
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy

PNG = "data:image/png;base64," + "A" * 64
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def chat_body(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(turns):
        messages.append(
            {
                "role": "user",
                "content": [{"type": "text", "text": f"step {i}"}, {"type": "image_url", "image_url": {"url": PNG}}],
            }
        )
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": "contents"})
    tools = [{"type": "function", "function": {"name": f"tool_{k}", "parameters": SCHEMA}} for k in range(10)]
    return {
        "model": "m",
        "messages": messages,
        "tools": tools,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def responses_body(turns: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "developer", "content": "You are a coding agent."}]
    for i in range(turns):
        parts = [{"type": "input_text", "text": f"step {i}"}, {"type": "input_image", "image_url": PNG}]
        items.append({"role": "user", "content": parts})
        items.append({"type": "reasoning", "id": f"rs_{i}", "summary": [{"type": "summary_text", "text": "think"}]})
        items.append({"type": "function_call", "call_id": f"c{i}", "name": "read_file", "arguments": "{}"})
        items.append({"type": "function_call_output", "call_id": f"c{i}", "output": "contents"})
    tools = [{"type": "function", "name": f"tool_{k}", "parameters": SCHEMA} for k in range(10)]
    return {
        "model": "m",
        "input": items,
        "tools": tools,
        "reasoning": {"summary": "auto"},
        "text": {"verbosity": "low"},
        "include": ["reasoning.encrypted_content"],
        "stream": True,
    }


def messages_body(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 64}}
        messages.append({"role": "user", "content": [{"type": "text", "text": f"step {i}"}, image]})
        use = {"type": "tool_use", "id": f"t{i}", "name": "read_file", "input": {"path": "a"}}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "reading"}, use]})
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": [{"type": "text", "text": "contents"}]}
        messages.append({"role": "user", "content": [result]})
    tools = [{"name": f"tool_{k}", "input_schema": SCHEMA} for k in range(10)]
    system = [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}]
    return {"model": "m", "max_tokens": 100, "system": system, "messages": messages, "tools": tools, "stream": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    policy = ToolPolicy()  # every tool admitted: `gate` leaves the body as it was, so it can be reused
    for name, codec, body in (
        ("chat", CHAT, chat_body(args.turns)),
        ("responses", RESPONSES, responses_body(args.turns)),
        ("messages", MESSAGES, messages_body(args.turns)),
    ):
        before = copy.deepcopy(body)
        times = []
        for _ in range(args.calls):
            start = time.perf_counter()
            codec.gate(body, Tier.SMALL, policy)
            times.append(time.perf_counter() - start)
        assert body == before, f"{name}: gate changed a body it should have left alone"
        times.sort()
        p50, p99 = statistics.median(times) * 1e6, times[int(len(times) * 0.99)] * 1e6
        print(f"{name:10s} gate: p50 {p50:7.1f} us  p99 {p99:7.1f} us  ({args.turns} turns, {args.calls} calls)")


if __name__ == "__main__":
    main()
