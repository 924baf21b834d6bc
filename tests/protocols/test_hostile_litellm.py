"""A hostile client of a LiteLLM proxy with gatekeeper's hook (the red-team run for issue 20): LiteLLM
takes `fallbacks` from the request body (they replace the configured ones), so when the asked
model failed (here: big-model's upstream is overloaded) a request gated for the large model's
tier was sent, tools and all, to a small one. A real LiteLLM proxy (subprocess),
the official openai client, a fake upstream whose received bodies are the evidence."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
import yaml
from conftest import ROOT, make_profile, seed_store, tool
from serving import litellm_served
from upstreams import NativeServer

from gatekeeper.rules.tiers import Tier

HIDDEN = "execute_command"  # large under examples/gatekeeper.yaml


@pytest.fixture(scope="module")
def litellm_proxy(tmp_path_factory, default_suite) -> Iterator[tuple[openai.OpenAI, NativeServer]]:
    """LiteLLM serving big-model (measured large) and local-model (small), one upstream."""
    tmp = tmp_path_factory.mktemp("litellm")
    store = tmp / "models_profile.json"
    seed_store(
        store,
        make_profile("local-model", Tier.SMALL, default_suite),
        make_profile("big-model", Tier.LARGE, default_suite),
    )

    def overloaded_big_model(body: dict) -> dict:
        return {"status": 503, "error": "overloaded"} if body["model"] == "big-model" else {"content": "ok"}

    with NativeServer(overloaded_big_model) as upstream:
        config = yaml.safe_load((ROOT / "examples/litellm_config.yaml").read_text())
        local = config["model_list"][0]
        local["litellm_params"]["api_base"] = upstream.base_url
        big = {"model_name": "big-model", "litellm_params": dict(local["litellm_params"], model="openai/big-model")}
        config["model_list"].append(big)
        with litellm_served(config, upstream.base_url, store, tmp, timeout_s=180) as (url, key):
            yield openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60), upstream


@pytest.mark.parametrize(
    "rerouting",
    [
        {"fallbacks": ["local-model"]},
        {"fallbacks": [{"model": "local-model"}]},
    ],
    ids=["names", "objects"],
)
def test_client_fallbacks_never_carry_a_large_tier_s_tools_to_another_model(litellm_proxy, rerouting):
    client, upstream = litellm_proxy
    seen = len(upstream.requests)
    with pytest.raises(openai.BadRequestError, match="another model"):
        client.chat.completions.create(
            model="big-model", messages=[{"role": "user", "content": "hi"}], tools=[tool(HIDDEN)], extra_body=rerouting
        )
    assert upstream.requests[seen:] == []  # nothing sent: neither to big-model nor to local-model


def test_without_fallbacks_the_large_model_keeps_its_tools(litellm_proxy):
    client, upstream = litellm_proxy
    with pytest.raises(openai.APIStatusError):  # big-model's upstream is overloaded
        client.chat.completions.create(
            model="big-model", messages=[{"role": "user", "content": "hi"}], tools=[tool(HIDDEN)]
        )
    assert {r["model"] for r in upstream.requests} == {"big-model"}
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == [HIDDEN]
