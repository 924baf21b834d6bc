"""Codex (npm `@openai/codex`, pinned in tests/js/codex/package.json) through the real proxy with
the `config.toml` of docs/frameworks.md: `codex exec` over the Responses API, streamed. Its shell tool is
hidden at the model's tier: it never reaches the upstream, and a call to it never reaches Codex."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Proxy, small_model_proxy
from upstreams import NativeServer

CODEX = ROOT / "tests" / "js" / "codex"
# The model answers with text and a call to the hidden shell tool.
ANSWER = {"content": "hello from the model", "tool_calls": [{"name": "exec_command", "arguments": {"cmd": "rm -rf ~"}}]}


@pytest.fixture(scope="module")
def codex() -> Path:
    binary = CODEX / "node_modules" / ".bin" / "codex"
    if not binary.exists():
        subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"], cwd=CODEX, check=True, timeout=600, capture_output=True
        )
    return binary


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer(lambda body: ANSWER) as server:
        yield server


@pytest.fixture
def proxy(upstream, store_path, default_suite) -> Iterator[Proxy]:
    with small_model_proxy(
        upstream.base_url,
        store_path,
        default_suite,
        tools={"default_tier": "small", "required_tier": {"exec_command": "large", "write_stdin": "large"}},
    ) as running:
        yield running


def readme_config() -> str:
    page = (ROOT / "docs/frameworks.md").read_text()
    block = re.search(r'```toml\n(model = "my-model"\n.*?)```', page, re.S)
    assert block, "docs/frameworks.md lacks the Codex config.toml"
    return block.group(1)


def test_codex_through_the_proxy(codex, proxy, upstream, tmp_path):
    done = _run_codex(codex, proxy, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hello from the model" in done.stdout
    assert len(upstream.responses_requests) == 1  # no tool ran, so no second turn with its output
    sent = upstream.responses_requests[0]
    names = [t.get("name") or t.get("type") for t in sent["tools"]]
    assert "exec_command" not in names and "write_stdin" not in names and names
    assert sent["stream"] is True


def _run_codex(codex: Path, proxy: Proxy, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    home = tmp_path / "codex-home"
    home.mkdir()
    config = readme_config().replace("http://127.0.0.1:8000", proxy.url).replace("my-model", "small-model")
    (home / "config.toml").write_text(config)
    return subprocess.run(
        [str(codex), "exec", "--skip-git-repo-check", "say hi"],
        cwd=tmp_path,
        env=os.environ | {"CODEX_HOME": str(home), "OPENAI_API_KEY": "k"},
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


def _translated_proxy(
    upstream: NativeServer, store_path: Path, suite: Any, web_search: str | None, **changes: Any
) -> Any:
    """A chat-only upstream; the README's rules (the shell tools named; `web_search`, unless
    named here, gets the default tier: the tier admits it)."""
    rules = {"exec_command": "large", "write_stdin": "large"} | ({"web_search": web_search} if web_search else {})
    return small_model_proxy(
        upstream.base_url,
        store_path,
        suite,
        upstream={"base_url": upstream.base_url, "protocols": ["chat"]},
        tools={"default_tier": "small", "required_tier": rules},
        **changes,
    )


def _chat_tool_names(upstream: NativeServer) -> list[str]:
    assert upstream.responses_requests == [] and len(upstream.requests) == 1
    return [t["function"]["name"] for t in upstream.requests[0]["tools"]]


def test_codex_through_a_chat_only_upstream(codex, store_path, default_suite, tmp_path):
    """Codex's default tools (a `namespace` of functions, the built-in `web_search`) through the
    Responses -> chat translation: namespaced functions become chat functions named
    `namespace__function`; web_search, which the tier hides here, was removed by gating."""
    with NativeServer(lambda body: {"content": "hello from the model"}) as upstream:
        with _translated_proxy(upstream, store_path, default_suite, web_search="large") as proxy:
            done = _run_codex(codex, proxy, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hello from the model" in done.stdout
    names = _chat_tool_names(upstream)
    assert "multi_agent_v1__spawn_agent" in names and "view_image" in names
    assert not {"exec_command", "write_stdin", "web_search"} & set(names)


def test_codex_in_its_default_mode_through_a_chat_only_upstream(codex, store_path, default_suite, tmp_path):
    """The README's rules name only the shell tools, so the tier admits Codex's default
    `web_search`: a chat model cannot call a built-in, so the translation leaves it out (it was
    refused, and `codex exec` exited 1 before any request reached the upstream)."""
    with NativeServer(lambda body: {"content": "hello from the model"}) as upstream:
        with _translated_proxy(upstream, store_path, default_suite, web_search=None) as proxy:
            done = _run_codex(codex, proxy, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "hello from the model" in done.stdout
    names = _chat_tool_names(upstream)
    assert "view_image" in names and not {"exec_command", "write_stdin", "web_search"} & set(names)


def test_codex_through_a_chat_only_upstream_runs_no_hidden_call(codex, store_path, default_suite, tmp_path):
    """The model calls the hidden shell tool; under `blocked_calls: explain` (the default) Codex
    reads the explanation instead of the call, runs nothing and ends its turn."""
    with NativeServer(lambda body: ANSWER) as upstream:
        with _translated_proxy(upstream, store_path, default_suite, None, blocked_calls="explain") as proxy:
            done = _run_codex(codex, proxy, tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    # `codex exec` prints the turn's last message: the explanation, which follows the model's text
    assert "A call to the tool `exec_command` was removed: it needs tier large" in done.stdout
    assert len(upstream.requests) == 1  # no tool ran, so no second turn with its output
