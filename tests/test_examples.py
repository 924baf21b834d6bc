"""Every example runs as written: scripts as subprocesses against a scripted model and a real
`gatekeeper serve` on a real port, the configs loaded the way their tools load them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network: litellm's bundled price map

import pytest
import yaml
from conftest import ROOT, make_profile, seed_store, wait_serving
from scripted import ScriptedServer, free_port

from gatekeeper.config import load_settings
from gatekeeper.rules.tiers import Tier

EXAMPLES = ROOT / "examples"
MODEL = "notes-model"


def notes_agent(body: dict) -> dict:
    """A scripted model that does the example task: write a note (or list them), then answer."""
    if body["messages"][-1]["role"] == "tool":
        return {"content": f"Done. The tool said: {body['messages'][-1]['content']}", "tool_calls": []}
    offered = {t["function"]["name"] for t in body.get("tools") or []}
    if "write_note" in offered:
        return {
            "content": None,
            "tool_calls": [{"name": "write_note", "arguments": {"name": "groceries", "text": "milk, eggs"}}],
        }
    return {"content": None, "tool_calls": [{"name": "list_notes", "arguments": {}}]}


def offered(body: dict) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]


@pytest.fixture
def model_server() -> Iterator[ScriptedServer]:
    with ScriptedServer(notes_agent) as server:
        yield server


@pytest.fixture
def example_env(model_server, tmp_path, default_suite) -> dict[str, str]:
    """Environment for examples/gatekeeper.yaml: the scripted model upstream, a seeded medium profile."""
    store = tmp_path / "models_profile.json"
    seed_store(store, make_profile(MODEL, Tier.MEDIUM, default_suite))
    return os.environ | {"GATEKEEPER_UPSTREAM": model_server.base_url, "GATEKEEPER_STORE": str(store)}


def run_example(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or dict(os.environ),
        cwd=ROOT,
    )


@pytest.fixture
def proxy_url(example_env) -> Iterator[str]:
    """`gatekeeper serve --config examples/gatekeeper.yaml` on a free port."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gatekeeper",
            "serve",
            "--config",
            str(EXAMPLES / "gatekeeper.yaml"),
            "--port",
            str(port),
        ],
        env=example_env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_serving(url + "/healthz", process)
        yield url + "/v1"
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_example_config_loads_and_covers_every_contract_key(monkeypatch):
    for var in (
        "GATEKEEPER_UPSTREAM",
        "GATEKEEPER_STORE",
        "GATEKEEPER_UNKNOWN_MODELS",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GATEKEEPER_ADMIN_KEY",
    ):
        monkeypatch.delenv(var, raising=False)
    settings = load_settings(EXAMPLES / "gatekeeper.yaml")
    assert settings.upstream.base_url == "http://127.0.0.1:8080/v1"
    assert settings.suite.resolve() == (ROOT / "benchmarks").resolve()
    assert settings.tools.required_tier["execute_command"] == Tier.LARGE
    raw = yaml.safe_load((EXAMPLES / "gatekeeper.yaml").read_text())
    contract = {
        "upstream",
        "models",
        "suite",
        "store",
        "unknown_models",
        "unknown_tier",
        "wait_timeout_s",
        "tools",
        "pins",
        "admin_key",
    }
    assert contract <= set(raw)
    assert {"base_url", "api_key"} <= set(raw["upstream"])
    assert {"name", "litellm_model", "api_key"} <= set(raw["models"][0])
    assert {"default_tier", "required_tier"} <= set(raw["tools"])


def test_agent_via_proxy_completes_a_tool_loop(model_server, proxy_url, tmp_path):
    notes = tmp_path / "notes"
    result = run_example("agent_via_proxy.py", "--base-url", proxy_url, "--model", MODEL, "--notes-dir", str(notes))
    assert result.returncode == 0, result.stderr
    assert "Done. The tool said: saved note 'groceries'" in result.stdout
    assert "tier medium (measured)" in result.stderr
    assert (notes / "groceries.txt").read_text() == "milk, eggs"
    agent_calls = [b for b in model_server.requests if b["model"] == MODEL]
    assert len(agent_calls) == 2
    # medium: write_note ("write_*") is offered, delete_note ("delete_*": large) is hidden by the proxy.
    assert offered(agent_calls[0]) == ["list_notes", "read_note", "write_note"]
    assert agent_calls[1]["messages"][-1] == {
        "role": "tool",
        "tool_call_id": agent_calls[1]["messages"][-2]["tool_calls"][0]["id"],
        "content": "saved note 'groceries'",
    }


def test_agent_in_process_completes_a_tool_loop(model_server, example_env, tmp_path):
    notes = tmp_path / "notes"
    result = run_example(
        "agent_in_process.py",
        "--base-url",
        model_server.base_url,
        "--model",
        MODEL,
        "--notes-dir",
        str(notes),
        env=example_env,
    )
    assert result.returncode == 0, result.stderr
    assert "Done. The tool said: saved note 'groceries'" in result.stdout
    assert "tier medium (measured)" in result.stderr
    assert (notes / "groceries.txt").read_text() == "milk, eggs"
    assert len(model_server.requests) == 2
    assert offered(model_server.requests[0]) == ["list_notes", "read_note", "write_note"]


def test_agent_in_process_refuses_a_hidden_tool_the_model_calls_anyway(tmp_path, default_suite):
    """A small model hallucinates write_note, which it was never offered: the registry does not run it."""
    store = tmp_path / "models_profile.json"
    seed_store(store, make_profile(MODEL, Tier.SMALL, default_suite))

    def stubborn(body: dict) -> dict:
        if body["messages"][-1]["role"] == "tool":
            return {"content": body["messages"][-1]["content"], "tool_calls": []}
        return {"content": None, "tool_calls": [{"name": "write_note", "arguments": {"name": "x", "text": "y"}}]}

    notes = tmp_path / "notes"
    with ScriptedServer(stubborn) as server:
        env = os.environ | {"GATEKEEPER_STORE": str(store)}
        result = run_example(
            "agent_in_process.py", "--base-url", server.base_url, "--model", MODEL, "--notes-dir", str(notes), env=env
        )
    assert result.returncode == 0, result.stderr
    assert offered(server.requests[0]) == ["list_notes", "read_note"]
    assert "error: tool 'write_note' requires tier 'medium'" in result.stdout
    assert not (notes / "x.txt").exists()


@pytest.mark.parametrize("script", ["agent_via_proxy.py", "agent_in_process.py"])
def test_agents_exit_non_zero_with_a_clear_message_when_nothing_listens(script, tmp_path):
    env = os.environ | {"GATEKEEPER_STORE": str(tmp_path / "store.json")}
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = run_example(script, "--base-url", url, "--notes-dir", str(tmp_path / "notes"), env=env)
    assert result.returncode == 2
    assert f"nothing is listening at {url}" in result.stderr
    assert "Traceback" not in result.stderr


async def test_litellm_config_example_gates_through_litellm(model_server, example_env, monkeypatch):
    """examples/litellm_config.yaml: its callback resolved the way the LiteLLM proxy resolves it, its
    model_list routed by a litellm Router (the proxy's router), GATEKEEPER_CONFIG=examples/gatekeeper.yaml."""
    import litellm
    from litellm.caching.dual_cache import DualCache
    from litellm.proxy._types import UserAPIKeyAuth
    from litellm.proxy.types_utils.utils import get_instance_fn

    import gatekeeper.adapters.litellm_hook

    config_path = EXAMPLES / "litellm_config.yaml"
    config = yaml.safe_load(config_path.read_text())
    hook = get_instance_fn(config["litellm_settings"]["callbacks"], config_file_path=str(config_path))
    assert hook is gatekeeper.adapters.litellm_hook.proxy_handler_instance

    for var in ("GATEKEEPER_UPSTREAM", "GATEKEEPER_STORE"):
        monkeypatch.setenv(var, example_env[var])
    monkeypatch.setenv("GATEKEEPER_CONFIG", str(EXAMPLES / "gatekeeper.yaml"))
    monkeypatch.setattr(hook, "_gk", None)  # built from GATEKEEPER_CONFIG on first use, for this test only
    deployment = config["model_list"][0]
    deployment = deployment | {
        "model_name": MODEL,
        "litellm_params": deployment["litellm_params"] | {"api_base": model_server.base_url},
    }
    router = litellm.Router(model_list=[deployment])
    tools, _ = _example_tools()
    try:
        data = await hook.async_pre_call_hook(
            UserAPIKeyAuth(),
            DualCache(),
            {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "tools": tools},
            "acompletion",
        )
        response = await router.acompletion(**data)
    finally:
        hook.gk.close()
    assert response.choices[0].message.tool_calls[0].function.name == "write_note"
    assert offered(model_server.requests[-1]) == ["list_notes", "read_note", "write_note"]


def _example_tools() -> tuple[list[dict], dict]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import agent_via_proxy
    finally:
        sys.path.remove(str(EXAMPLES))
    return agent_via_proxy.notes_tools(Path("/nonexistent"))


def test_litellm_hook_doc_shows_the_config_lines():
    doc = (EXAMPLES / "litellm_hook.md").read_text()
    assert "callbacks: gatekeeper.adapters.litellm_hook.proxy_handler_instance" in doc
    assert "GATEKEEPER_CONFIG" in doc
