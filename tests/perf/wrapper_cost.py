"""What the in-process SDK wrapper adds to one call: `gate_client(openai.OpenAI(...), gk)` against
the same client ungated, both over an in-memory transport (no network), a chat request offering
20 tools and an answer with one call to an offered tool (parsed, enforced, re-written).

    python tests/perf/wrapper_cost.py [--calls 2000]

Prints the median time per call of each and the difference. Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx2
import openai

from gatekeeper import Gatekeeper, Settings
from gatekeeper.adapters.openai_sdk import gate_client
from gatekeeper.observe.logs import configure as configure_logs

TOOLS = [
    {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object", "properties": {}}}}
    for i in range(20)
]
ANSWER = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "tool_3", "arguments": "{}"}}],
            },
            "finish_reason": "tool_calls",
        }
    ],
}


def handler(request: httpx2.Request) -> httpx2.Response:
    return httpx2.Response(200, content=json.dumps(ANSWER).encode(), headers={"content-type": "application/json"})


def timed(client: openai.OpenAI, calls: int) -> float:
    messages = [{"role": "user", "content": "hi"}]
    for _ in range(50):  # warm up
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS)  # type: ignore[arg-type]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    configure_logs("warning")
    store = Path(tempfile.mkdtemp()) / "store.json"
    settings = Settings.model_validate(
        {"upstream": {"base_url": "http://u/v1"}, "store": str(store), "pins": {"m": "large"}}
    )
    gk = Gatekeeper(settings)
    try:
        plain = openai.OpenAI(
            base_url="http://u/v1", api_key="k", http_client=httpx2.Client(transport=httpx2.MockTransport(handler))
        )
        gated = gate_client(plain, gk)
        assert (
            gated.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], tools=TOOLS)
            .choices[0]
            .message.tool_calls
        )
        ungated_s, gated_s = timed(plain, args.calls), timed(gated, args.calls)
    finally:
        gk.close()
    print(f"{args.calls} calls, 20 tools, one offered call in each answer")
    print(f"  ungated client: median {ungated_s * 1e6:.0f} us/call")
    print(
        f"  gated client:   median {gated_s * 1e6:.0f} us/call (+{(gated_s - ungated_s) * 1e6:.0f} us: request gated twice, answer enforced)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
