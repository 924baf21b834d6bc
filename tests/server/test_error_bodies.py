"""Error bodies name no upstream address, credential or internal path; the log line does
(issue 43). Through the real proxy on a real port, with the official openai client: an
unreachable upstream, a slow one, a litellm route whose provider is down (the MCP door's:
tests/mcp/test_mcp_error_bodies.py)."""

from __future__ import annotations

import json

import openai
import pytest
import structlog
from conftest import make_profile, running_proxy, seed_store, settings_for
from scripted import ScriptedServer, free_port

from gatekeeper.rules.tiers import Tier

HI = [{"role": "user", "content": "hi"}]
OPERATOR_KEY = "operator-key-5b7e1c9d"


def refused(proxy, model: str = "m") -> openai.APIStatusError:
    client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="client-key", max_retries=0, timeout=60)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=model, messages=HI)
    return caught.value


def shown(error: openai.APIStatusError) -> str:
    return json.dumps(error.body) + error.response.text


def test_an_unreachable_upstream_is_a_502_that_names_no_address(store_path, default_suite):
    port = free_port()
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    settings = settings_for(f"http://127.0.0.1:{port}/v1", store_path)
    with running_proxy(settings) as proxy, structlog.testing.capture_logs() as lines:
        error = refused(proxy)
    assert error.status_code == 502 and error.body["message"] == "the upstream is unreachable"
    assert str(port) not in shown(error) and "127.0.0.1" not in shown(error)
    (line,) = [e for e in lines if e["event"] == "upstream_failed"]
    assert line["upstream"] == f"http://127.0.0.1:{port}/v1" and "Connect" in line["error"]


def test_a_slow_upstream_is_a_504_that_names_no_address(store_path, default_suite):
    with ScriptedServer(delay_s=1.0) as upstream:
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        upstream_settings = {"base_url": upstream.base_url, "api_key": OPERATOR_KEY, "timeout_s": 0.2}
        settings = settings_for(upstream.base_url, store_path, upstream=upstream_settings)
        with running_proxy(settings) as proxy, structlog.testing.capture_logs() as lines:
            error = refused(proxy)
    assert error.status_code == 504 and error.body["message"] == "the upstream timed out"
    assert str(upstream.port) not in shown(error) and OPERATOR_KEY not in shown(error)
    assert any(e["event"] == "upstream_failed" and e["upstream"] == upstream.base_url for e in lines)


def test_a_litellm_route_whose_provider_is_down_names_no_address_model_or_key(store_path, default_suite):
    port = free_port()
    seed_store(store_path, make_profile("routed", Tier.SMALL, default_suite))
    route = {
        "name": "routed",
        "litellm_model": "openai/internal-deployment-7",
        "api_base": f"http://127.0.0.1:{port}/v1",
        "api_key": OPERATOR_KEY,
    }
    settings = settings_for(f"http://127.0.0.1:{free_port()}/v1", store_path, models=[route])
    with running_proxy(settings) as proxy, structlog.testing.capture_logs() as lines:
        error = refused(proxy, "routed")
    assert error.status_code >= 500
    assert error.body["message"].startswith("model 'routed': the provider failed")
    for private in (str(port), "127.0.0.1", "internal-deployment-7", OPERATOR_KEY):
        assert private not in shown(error), private
    (line,) = [e for e in lines if e["event"] == "upstream_failed"]
    assert line["litellm_model"] == "openai/internal-deployment-7" and OPERATOR_KEY not in json.dumps(line)


def test_an_upstream_that_quotes_its_own_address_in_an_error_does_not_tell_the_client(store_path, default_suite):
    where: list[str] = []
    with ScriptedServer(lambda body: {"status": 503, "error": f"overloaded: {where[0]}/chat/completions"}) as upstream:
        where.append(upstream.base_url)
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
            error = refused(proxy)
    assert error.status_code == 503 and error.body["message"].startswith("overloaded: ***")
    assert str(upstream.port) not in shown(error)
