"""The Vercel AI SDK (npm `ai` with `@ai-sdk/openai` and `@ai-sdk/anthropic`, pinned in
tests/js/package.json) through the real proxy with the lines of docs/frameworks.md: `generateText` with three
tools over the Responses API and the Messages API. The npm packages are installed on first run."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Proxy, small_model_proxy
from upstreams import NativeServer

JS = ROOT / "tests" / "js"
BOTH = {
    "content": "on it",
    "tool_calls": [
        {"name": "execute_command", "arguments": {"path": "x"}},
        {"name": "read_file", "arguments": {"path": "a"}},
    ],
}


@pytest.fixture(scope="module")
def node_modules() -> Path:
    if not (JS / "node_modules" / "ai").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=600, capture_output=True)
    return JS / "node_modules"


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer(lambda body: BOTH) as server:
        yield server


@pytest.fixture
def proxy(upstream, store_path, default_suite) -> Iterator[Proxy]:
    with small_model_proxy(upstream.base_url, store_path, default_suite) as running:
        yield running


def generate_text(proxy: Proxy, provider: str) -> dict:
    done = subprocess.run(
        ["node", "vercel_ai.mjs", proxy.url, "small-model", provider],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("provider, api", [("openai", "responses_requests"), ("anthropic", "messages_requests")])
def test_vercel_ai_sdk_through_the_proxy(node_modules, proxy, upstream, provider, api):
    seen = generate_text(proxy, provider)
    assert seen == {
        "text": "on it",
        "toolCalls": ["read_file"],
        "ran": ["read_file"],
    }  # the hidden call never reached it
    sent = getattr(upstream, api)[-1]
    assert [t["name"] for t in sent["tools"]] == ["read_file"]


def test_vercel_lines_are_the_frameworks_page_lines():
    readme = (ROOT / "docs/frameworks.md").read_text()
    script = (JS / "vercel_ai.mjs").read_text()
    for line in (
        'import { createOpenAI } from "@ai-sdk/openai";',
        'import { createAnthropic } from "@ai-sdk/anthropic";',
    ):
        assert line in readme and line in script
    for provider in ("createOpenAI", "createAnthropic"):
        readme_line = next(
            line for line in readme.splitlines() if line.startswith(f"const {provider[6:].lower()} = {provider}(")
        )
        assert readme_line.replace('"http://127.0.0.1:8000/v1"', "`${base}/v1`") in script
