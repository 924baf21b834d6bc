#!/usr/bin/env python
"""Probe llama-cpp-python's OpenAI-compatible server with the bundled Gemma 3 270M.

Checks, against a real server started with gatekeeper.measuring.localmodel.LocalModelServer, the
claims recorded in docs/local-model-notes.md, and writes every measurement as JSON:

    . .venv/bin/activate
    python scripts/probe_llama.py --out /tmp/probe.json      # ~3-5 minutes on 2 cores

Each probe is a plain request over HTTP (httpx), so what is recorded is what the server
sends, not what a client library makes of it. The prompt the model really sees is
captured by running llama_cpp's own `chatml_function_calling` handler on a stub model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the tools the tests offer

from sample_tools import TIME_TOOL, WEATHER_TOOL

from gatekeeper.measuring.localmodel import LocalModelServer

SYSTEM = "You are a helpful assistant. Use a function when one fits the request."
TOOLS = [WEATHER_TOOL, TIME_TOOL]
USER_WEATHER = "What is the weather in Paris?"


def chat(client: httpx.Client, **body: Any) -> tuple[dict[str, Any], float, int]:
    started = time.monotonic()
    response = client.post("/chat/completions", json=body)
    elapsed = time.monotonic() - started
    try:
        data = response.json()
    except ValueError:
        data = {"raw": response.text}
    return data, elapsed, response.status_code


def msgs(user: str, system: str | None = SYSTEM) -> list[dict[str, str]]:
    out = [{"role": "system", "content": system}] if system is not None else []
    return out + [{"role": "user", "content": user}]


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """The parts of a chat completion that matter here."""
    if "choices" not in data:
        return {"error": data}
    choice = data["choices"][0]
    message = choice.get("message") or {}
    return {
        "finish_reason": choice.get("finish_reason"),
        "content": message.get("content"),
        "tool_calls": message.get("tool_calls"),
        "usage": data.get("usage"),
    }


def count_tokens(client: httpx.Client, text: str) -> int:
    # The extras live beside /v1, not under it.
    url = str(client.base_url).rstrip("/").removesuffix("/v1") + "/extras/tokenize/count"
    response = client.post(url, json={"input": text})
    response.raise_for_status()
    return int(response.json()["count"])


# -- what the model sees ---------------------------------------------------------------


def rendered_prompts(messages: list[dict[str, Any]], **kwargs: Any) -> list[str]:
    """Run llama_cpp's chatml-function-calling handler on a stub model; return the
    prompts it would send to the model (the first one is the full rendered chat)."""
    from llama_cpp import llama_chat_format

    class Stub:
        verbose = False

        def __init__(self) -> None:
            self.prompts: list[str] = []

        def create_completion(self, prompt: str, **_: Any) -> dict[str, Any]:
            self.prompts.append(prompt)
            # For tool_choice=auto: choose "message" so the handler stops after 2 calls.
            text = "message:" if len(self.prompts) == 1 else ""
            return {
                "id": "cmpl-stub",
                "object": "text_completion",
                "created": 0,
                "model": "stub",
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            }

    stub = Stub()
    llama_chat_format.chatml_function_calling(stub, messages=messages, **kwargs)  # type: ignore[arg-type]
    return stub.prompts


# -- probes -----------------------------------------------------------------------------


def probe_speed(client: httpx.Client, runs: int = 3) -> dict[str, Any]:
    """128-token completions (`min_tokens`, a llama_cpp server extra, masks EOS until
    then); `typical_short_requests` is what an ordinary short chat request costs."""
    results = []
    for i in range(runs):
        # Chat requests end at the "<|im_end|>" stop *string*, which min_tokens (an EOS
        # mask) cannot hold back; the plain completions endpoint runs the same model.
        started = time.monotonic()
        response = client.post(
            "/completions",
            json={
                "prompt": f"Chapter {i + 1}. Once upon a time, a cat named Tom",
                "max_tokens": 128,
                "min_tokens": 128,
                "temperature": 0,
            },
        )
        elapsed = time.monotonic() - started
        data = response.json()
        tokens = data["usage"]["completion_tokens"]
        results.append(
            {
                "seconds": round(elapsed, 2),
                "completion_tokens": tokens,
                "prompt_tokens": data["usage"]["prompt_tokens"],
                "tokens_per_second": round(tokens / elapsed, 1),
                "finish_reason": data["choices"][0]["finish_reason"],
            }
        )
    typical = []
    for user in ("What is 2+2?", "Name three colors.", "Say hello."):
        data, elapsed, _ = chat(client, messages=msgs(user, None), max_tokens=128, temperature=0)
        typical.append({"prompt": user, "seconds": round(elapsed, 2), **data["usage"]})
    return {
        "runs": results,
        "median_seconds_128_tokens": statistics.median(r["seconds"] for r in results),
        "median_tokens_per_second": statistics.median(r["tokens_per_second"] for r in results),
        "typical_short_requests": typical,
    }


def probe_default_temperature(client: httpx.Client, n: int = 12) -> dict[str, Any]:
    """The request model's default, as the server publishes it, plus behaviour: with the
    temperature unset, outputs vary about as much as at 0.8 (and far more than at 0.2)."""
    root = str(client.base_url).rstrip("/").removesuffix("/v1")
    schema = httpx.get(root + "/openapi.json").json()["components"]["schemas"]
    published = schema["CreateChatCompletionRequest"]["properties"]["temperature"].get("default")
    base = {"messages": msgs("My favourite animal is", None), "max_tokens": 12}
    greedy = chat(client, **base, temperature=0)[0]["choices"][0]["message"]["content"]
    stats = {}
    for label, extra in {"unset": {}, "0.8": {"temperature": 0.8}, "0.2": {"temperature": 0.2}}.items():
        texts = [chat(client, **base, **extra)[0]["choices"][0]["message"]["content"] for _ in range(n)]
        stats[label] = {
            "distinct_outputs": len(set(texts)),
            "equal_to_greedy": sum(t == greedy for t in texts),
            "samples": texts[:4],
        }
    seeded = [chat(client, **base, temperature=0.8, seed=7)[0]["choices"][0]["message"]["content"] for _ in range(3)]
    return {
        "openapi_default": published,
        "greedy": greedy,
        "runs_each": n,
        "stats": stats,
        "same_seed_three_runs": seeded,
        "seed_respected": len(set(seeded)) == 1,
    }


def probe_prompt_rendering(client: httpx.Client) -> dict[str, Any]:
    """Which variants show the tools to the model, and the HTML escaping."""
    out: dict[str, Any] = {}
    variants = {
        "tools_no_tool_choice_system": {"messages": msgs(USER_WEATHER), "tools": TOOLS},
        "tools_choice_none_system": {"messages": msgs(USER_WEATHER), "tools": TOOLS, "tool_choice": "none"},
        "tools_choice_auto_system": {"messages": msgs(USER_WEATHER), "tools": TOOLS, "tool_choice": "auto"},
        "tools_choice_auto_no_system": {"messages": msgs(USER_WEATHER, None), "tools": TOOLS, "tool_choice": "auto"},
    }
    for name, kwargs in variants.items():
        prompt = rendered_prompts(**kwargs)[0]
        out[name] = {"tools_in_prompt": "get_weather" in prompt, "prompt": prompt}

    history = msgs("What is the weather in Paris?") + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"temp_c": 21}'},
    ]
    prompt = rendered_prompts(history, tools=TOOLS, tool_choice="auto")[0]
    out["multi_turn_tool_result"] = {
        "tool_result_in_prompt": "temp_c" in prompt,
        "prompt_tail": prompt[prompt.index("<|im_start|>user") :],
    }

    quoted = "He said \"yes\" & she said 'no' <ok>"
    prompt = rendered_prompts(msgs(quoted, None))[0]
    out["html_escape"] = {"message": quoted, "rendered": prompt}
    # The server side: the prompt_tokens it reports match the escaped rendering only.
    data, _, _ = chat(client, messages=msgs(quoted, None), max_tokens=1, temperature=0)
    raw = prompt.replace("He said &#34;yes&#34; &amp; she said &#39;no&#39; &lt;ok&gt;", quoted)
    out["html_escape"]["server_prompt_tokens"] = data["usage"]["prompt_tokens"]
    out["html_escape"]["tokens_if_escaped"] = count_tokens(client, prompt)
    out["html_escape"]["tokens_if_raw"] = count_tokens(client, raw)
    return out


def probe_reasoning_effort(client: httpx.Client) -> dict[str, Any]:
    base = {"messages": msgs("Name three colors.", None), "max_tokens": 30, "temperature": 0}
    out = {}
    for value in (None, "low", "high", "bogus-value", 42):
        extra = {} if value is None else {"reasoning_effort": value}
        data, _, status = chat(client, **base, **extra)
        out[str(value)] = {"status": status, **summary(data)}
    texts = {v["content"] for v in out.values()}
    return {"results": out, "all_identical": len(texts) == 1}


def probe_tool_calls(client: httpx.Client) -> dict[str, Any]:
    out: dict[str, Any] = {}
    prompts = [
        USER_WEATHER,
        "What time is it in Tokyo?",
        "Get the weather for London.",
        "Hello, how are you?",
        "Write a poem about the sea.",
    ]
    for system in (SYSTEM, None):
        key = "system" if system else "no_system"
        out[f"auto_{key}"] = {}
        for user in prompts:
            data, elapsed, status = chat(
                client,
                messages=msgs(user, system),
                tools=TOOLS,
                tool_choice="auto",
                temperature=0,
                max_tokens=64,
            )
            out[f"auto_{key}"][user] = {"status": status, "seconds": round(elapsed, 2), **summary(data)}
    data, elapsed, status = chat(
        client,
        messages=msgs(USER_WEATHER),
        tools=TOOLS,
        tool_choice="auto",
        temperature=0,
        max_tokens=64,
    )
    out["raw_tool_call_response"] = data
    data, _, status = chat(
        client,
        messages=msgs(USER_WEATHER),
        tools=TOOLS,
        temperature=0,
        max_tokens=48,
    )
    out["no_tool_choice"] = {"status": status, **summary(data)}
    data, _, status = chat(
        client,
        messages=msgs(USER_WEATHER),
        tools=TOOLS,
        tool_choice="none",
        temperature=0,
        max_tokens=48,
    )
    out["tool_choice_none"] = {"status": status, **summary(data)}
    for system in (SYSTEM, None):
        data, elapsed, status = chat(
            client,
            messages=msgs(USER_WEATHER, system),
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=0,
            max_tokens=64,
        )
        out["forced_" + ("system" if system else "no_system")] = {
            "status": status,
            "seconds": round(elapsed, 2),
            **summary(data),
            "raw": data,
        }
    data, _, status = chat(
        client,
        messages=msgs(USER_WEATHER),
        tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "no_such_tool"}},
        max_tokens=16,
    )
    out["forced_unknown_tool"] = {"status": status, "body": data}
    return out


def probe_auto_max_tokens(client: httpx.Client) -> dict[str, Any]:
    """With tool_choice=auto the handler passes max_tokens=None to the model."""
    data, elapsed, status = chat(
        client,
        messages=msgs("Write a poem about the sea.", None),
        tools=TOOLS,
        tool_choice="auto",
        temperature=0,
        max_tokens=8,
    )
    return {"requested_max_tokens": 8, "status": status, "seconds": round(elapsed, 2), **summary(data)}


def stream_raw(base_url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    chunks: list[dict[str, Any]] = []
    error = None
    started = time.monotonic()
    status = None
    headers: dict[str, str] = {}
    try:
        with httpx.Client(base_url=base_url, timeout=timeout) as client:
            with client.stream("POST", "/chat/completions", json=body) as response:
                status = response.status_code
                headers = dict(response.headers)
                for raw in response.iter_raw():
                    chunks.append({"t": round(time.monotonic() - started, 3), "bytes": raw.decode("utf-8", "replace")})
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    body_text = "".join(c["bytes"] for c in chunks)
    return {
        "status": status,
        "headers": headers,
        "chunks": chunks,
        "total_bytes": len(body_text.encode()),
        "has_done": "[DONE]" in body_text,
        "client_error": error,
        "seconds": round(time.monotonic() - started, 2),
    }


def stream_socket(host: str, port: int, body: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """The exact bytes on the wire (HTTP/1.1 chunked framing included) until the server
    closes the connection or `timeout` passes."""
    import socket

    payload = json.dumps(body).encode()
    request = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + payload
    received = b""
    started = time.monotonic()
    ending = "closed by server"
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(request)
        try:
            while True:
                block = sock.recv(65536)
                if not block:
                    break
                received += block
        except TimeoutError:
            ending = f"still open after {timeout}s"
        except ConnectionResetError:
            ending = "reset by server"
    head, _, wire_body = received.partition(b"\r\n\r\n")
    return {
        "status_line": head.split(b"\r\n", 1)[0].decode(),
        "body_bytes": wire_body.decode("latin-1"),
        "ending": ending,
        "seconds": round(time.monotonic() - started, 2),
    }


def probe_streaming(server: LocalModelServer) -> dict[str, Any]:
    out: dict[str, Any] = {}
    assert server.port is not None
    out["auto_tool_call_wire"] = stream_socket(
        server.host,
        server.port,
        {
            "messages": msgs(USER_WEATHER),
            "tools": TOOLS,
            "tool_choice": "auto",
            "temperature": 0,
            "max_tokens": 64,
            "stream": True,
        },
    )
    out["auto_message_wire"] = stream_socket(
        server.host,
        server.port,
        {
            "messages": msgs("Hello, how are you?", None),
            "tools": TOOLS,
            "tool_choice": "auto",
            "temperature": 0,
            "max_tokens": 64,
            "stream": True,
        },
    )
    log_before = server.log_path.stat().st_size if server.log_path else 0
    out["auto_tool_call"] = stream_raw(
        server.base_url,
        {
            "messages": msgs(USER_WEATHER),
            "tools": TOOLS,
            "tool_choice": "auto",
            "temperature": 0,
            "max_tokens": 64,
            "stream": True,
        },
    )
    time.sleep(0.5)
    if server.log_path:
        with server.log_path.open("rb") as fh:
            fh.seek(log_before)
            out["auto_tool_call"]["server_log"] = fh.read().decode("utf-8", "replace")[-3000:]
    out["plain"] = stream_raw(
        server.base_url,
        {
            "messages": msgs("Say hi.", None),
            "temperature": 0,
            "max_tokens": 8,
            "stream": True,
        },
    )
    out["forced_tool"] = stream_raw(
        server.base_url,
        {
            "messages": msgs(USER_WEATHER),
            "tools": TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "temperature": 0,
            "max_tokens": 64,
            "stream": True,
        },
    )
    # What the official client makes of the broken stream.
    try:
        import openai

        client = openai.OpenAI(base_url=server.base_url, api_key="local", max_retries=0)
        stream = client.chat.completions.create(
            model=server.model,
            messages=msgs(USER_WEATHER),
            tools=TOOLS,
            tool_choice="auto",
            temperature=0,
            max_tokens=64,
            stream=True,
        )
        events = [chunk.model_dump() for chunk in stream]
        out["openai_client"] = {"events": events, "error": None}
    except Exception as exc:  # noqa: BLE001 - recording what happens is the point
        out["openai_client"] = {"error": f"{type(exc).__name__}: {exc}"}
    return out


def probe_stops(client: httpx.Client) -> dict[str, Any]:
    prompts = [
        "Say hello.",
        "What is 2+2?",
        "Name a fruit.",
        "Reply with one word: yes or no.",
        "What is the capital of France?",
        "Translate 'cat' to French.",
        "Give me a number between 1 and 10.",
        "Answer briefly: is water wet?",
        "Write a haiku about autumn.",
        "Explain photosynthesis in one sentence.",
    ]
    reasons = {}
    for label, system, temperature in (
        ("no_system_t0", None, 0),
        ("no_system_default_t", None, None),
        ("system_t0", "You are a helpful assistant. Answer briefly.", 0),
        ("system_default_t", "You are a helpful assistant. Answer briefly.", None),
    ):
        reasons[label] = []
        for user in prompts:
            body: dict[str, Any] = {"messages": msgs(user, system), "max_tokens": 128}
            if temperature is not None:
                body["temperature"] = temperature
            data, elapsed, _ = chat(client, **body)
            reasons[label].append(
                {
                    "prompt": user,
                    "finish_reason": data["choices"][0]["finish_reason"],
                    "completion_tokens": data["usage"]["completion_tokens"],
                    "seconds": round(elapsed, 2),
                    "content": data["choices"][0]["message"]["content"],
                }
            )
    counts = {k: sum(r["finish_reason"] == "stop" for r in v) for k, v in reasons.items()}
    return {"results": reasons, "stopped_by_itself": counts, "out_of": len(prompts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="write the JSON report here")
    parser.add_argument("--n-threads", type=int, default=None)
    parser.add_argument("--only", nargs="*", default=None, help="probe names to run")
    args = parser.parse_args()

    report: dict[str, Any] = {"cpu_count": os.cpu_count()}
    with LocalModelServer(n_threads=args.n_threads) as server:
        report["server"] = {
            "cmd": server.command(),
            "startup_seconds": server.startup_seconds,
            "model": server.model,
            "log_path": str(server.log_path),
        }
        probes = {
            "speed": probe_speed,
            "default_temperature": probe_default_temperature,
            "prompt_rendering": probe_prompt_rendering,
            "reasoning_effort": probe_reasoning_effort,
            "tool_calls": probe_tool_calls,
            "auto_max_tokens": probe_auto_max_tokens,
            "streaming": lambda c: probe_streaming(server),
            "stops": probe_stops,
        }
        with httpx.Client(base_url=server.base_url, timeout=600) as client:
            for name, probe in probes.items():
                if args.only and name not in args.only:
                    continue
                started = time.monotonic()
                report[name] = probe(client)
                report[name + "_probe_seconds"] = round(time.monotonic() - started, 1)
                print(f"probe {name}: done in {report[name + '_probe_seconds']}s", file=sys.stderr)
        report["server_log_tail"] = server.log_tail(15)
    text = json.dumps(report, indent=2, ensure_ascii=False)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
