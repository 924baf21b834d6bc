"""Routing in the proxy's pipeline without a port (MockUpstream, the official client in process):
fast checks beside the real-HTTP ones in test_proxy_routing.py."""

from __future__ import annotations

import openai
from conftest import make_profile, seed_store, settings_for, tool
from scripted import chat_completion
from starlette.testclient import TestClient

from gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier
from gatekeeper.server.app import create_app
from gatekeeper.server.mock import MockAnswer, MockUpstream

HI = [{"role": "user", "content": "hi"}]


def test_the_upstream_request_carries_the_routed_pair_and_the_tools_it_admits(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="high"),
    )
    sent = []

    def handler(request):
        sent.append(request)
        return MockAnswer.json(chat_completion({"content": "ok"}))

    gk = Gatekeeper(settings_for("http://upstream.invalid/v1", store_path, routing={}))
    try:
        with TestClient(create_app(gk, upstream=MockUpstream(handler))) as http:
            client = openai.OpenAI(base_url="http://testserver/v1", api_key="k", http_client=http, max_retries=0)
            tools = [tool("read_file"), tool("execute_command")]
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=HI, tools=tools, reasoning_effort="low"
            )
    finally:
        gk.close()
    assert raw.headers["x-gatekeeper-routed"] == "m@high" and raw.headers["x-gatekeeper-tier"] == "large"
    body = sent[-1].body
    assert body["reasoning_effort"] == "high" and [t["function"]["name"] for t in body["tools"]] == [
        "read_file",
        "execute_command",
    ]
