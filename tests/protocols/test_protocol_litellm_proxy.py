"""examples/litellm_hook.md's start command, run as written against a fake upstream: a real LiteLLM
proxy (subprocess) with gatekeeper's hook, driven by the official openai and anthropic clients
over chat, Responses and Messages. Hidden tools never reach the upstream."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest
import yaml
from conftest import ROOT, make_profile, seed_store
from serving import litellm_served
from upstreams import NativeServer

from gatekeeper.rules.tiers import Tier

FUNCTIONS = [
    {"type": "function", "name": n, "parameters": {"type": "object", "properties": {}}}
    for n in ("read_file", "write_file", "execute_command")
]


@pytest.fixture(scope="module")
def litellm_proxy(tmp_path_factory, default_suite) -> Iterator[tuple[str, str, NativeServer]]:
    tmp = tmp_path_factory.mktemp("litellm")
    store = tmp / "models_profile.json"
    seed_store(store, make_profile("local-model", Tier.SMALL, default_suite))
    with NativeServer() as upstream:
        config = yaml.safe_load((ROOT / "examples/litellm_config.yaml").read_text())
        config["model_list"][0]["litellm_params"]["api_base"] = upstream.base_url  # the only change
        with litellm_served(config, upstream.base_url, store, tmp) as (url, key):
            yield url, key, upstream


def sent_since(upstream: NativeServer, counts: tuple[int, int, int]) -> list[str]:
    """Tool names of the one request the upstream received since `counts` (whichever API litellm chose)."""
    logs = (upstream.requests, upstream.responses_requests, upstream.messages_requests)
    new = [body for log, seen in zip(logs, counts, strict=True) for body in log[seen:]]
    assert len(new) == 1, new
    return [t.get("name") or t["function"]["name"] for t in new[0].get("tools", [])]


def counts(upstream: NativeServer) -> tuple[int, int, int]:
    return len(upstream.requests), len(upstream.responses_requests), len(upstream.messages_requests)


def test_chat_through_litellm_is_gated(litellm_proxy):
    url, key, upstream = litellm_proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    tools = [{"type": "function", "function": {"name": t["name"], "parameters": t["parameters"]}} for t in FUNCTIONS]
    client.chat.completions.create(model="local-model", messages=[{"role": "user", "content": "hi"}], tools=tools)
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]


def test_responses_through_litellm_is_gated(litellm_proxy):
    url, key, upstream = litellm_proxy
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)
    before = counts(upstream)
    client.responses.create(model="local-model", input="hi", tools=FUNCTIONS)
    assert sent_since(upstream, before) == ["read_file"]


def test_messages_through_litellm_are_gated(litellm_proxy):
    url, key, upstream = litellm_proxy
    client = anthropic.Anthropic(base_url=url, api_key=key, max_retries=0)
    before = counts(upstream)
    client.messages.create(
        model="local-model",
        max_tokens=50,
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": t["name"], "input_schema": t["parameters"]} for t in FUNCTIONS],
    )
    assert sent_since(upstream, before) == ["read_file"]
    with pytest.raises(anthropic.BadRequestError, match="execute_command"):
        client.messages.create(
            model="local-model",
            max_tokens=50,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"name": "execute_command", "input_schema": {"type": "object"}}],
            tool_choice={"type": "tool", "name": "execute_command"},
        )
