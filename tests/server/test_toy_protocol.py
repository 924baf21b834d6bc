"""A protocol added in one folder (tests/fixtures/toy_protocol/) plus one registry line is served
and gated end to end by the real proxy: its route, its tools hidden by tier, its choice of a
hidden tool refused, its answers enforced, its errors in its own shape; its token count, its
structured output and its credential header, each read from its codec and registry entry."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from conftest import make_profile, running_proxy, seed_store, settings_for
from fixtures.toy_protocol import TOY
from fixtures.toy_protocol.upstream import ToyUpstream

from gatekeeper import PROTOCOLS, register_protocol
from gatekeeper.drift.identity import ANONYMOUS, client_identity
from gatekeeper.rules.tiers import Tier

TOOLS = [{"name": "read_file"}, {"name": "write_file"}, {"name": "execute_command"}]


@pytest.fixture
def toy() -> Iterator[None]:
    register_protocol(TOY)  # the one line
    try:
        yield
    finally:
        PROTOCOLS.pop(TOY.name)


@pytest.fixture
def proxy(toy, store_path, default_suite):
    yield from _proxy(store_path, default_suite)


@pytest.fixture
def explaining(toy, store_path, default_suite):
    yield from _proxy(store_path, default_suite, blocked_calls="explain")


def _proxy(store_path, default_suite, **changes):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    with ToyUpstream() as upstream:
        settings = settings_for(
            upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "protocols": ["toy"]}, **changes
        )
        with running_proxy(settings) as running:
            running.upstream = upstream
            yield running


def generate(proxy, **body) -> httpx.Response:
    return httpx.post(f"{proxy.url}/v1/toy/generate", json={"model": "small-model", "prompt": "hi"} | body, timeout=30)


def test_the_toy_protocol_is_gated_at_the_models_tier(proxy):
    answer = generate(proxy, tools=TOOLS)
    assert answer.status_code == 200
    assert proxy.upstream.requests[-1]["tools"] == [{"name": "read_file"}]
    assert answer.headers["x-gatekeeper-tier"] == "small"
    # The upstream called a tool it was never offered: removed from the answer.
    assert [c["name"] for c in answer.json()["calls"]] == ["read_file"]
    assert answer.headers["x-gatekeeper-blocked-calls"] == "execute_command"


def test_forcing_a_hidden_tool_is_refused_in_the_toy_error_shape(proxy):
    answer = generate(proxy, tools=TOOLS, force="execute_command")
    assert answer.status_code == 400
    assert "execute_command" in answer.json()["toy_error"]["message"]
    assert proxy.upstream.requests == []


def test_an_unknown_toy_field_is_refused_before_any_measurement(proxy):
    answer = generate(proxy, model="unmeasured-model", tools=TOOLS, smuggled=1)
    assert answer.status_code == 400 and "smuggled" in answer.json()["toy_error"]["message"]
    assert proxy.gk.progress() == [] and proxy.upstream.requests == []


def test_an_unregistered_protocol_has_no_route(store_path, upstream):
    with running_proxy(settings_for(upstream.base_url, store_path)) as running:
        answer = httpx.post(f"{running.url}/v1/toy/generate", json={"model": "m"}, timeout=30)
    assert answer.status_code == 404


def test_the_toy_token_count_is_gated_and_sent_to_its_own_path(proxy):
    answer = httpx.post(
        f"{proxy.url}/v1/toy/count", json={"model": "small-model", "prompt": "two words", "tools": TOOLS}, timeout=30
    )
    assert answer.status_code == 200 and answer.json() == {"tokens": 2}
    assert proxy.upstream.requests[-1]["tools"] == [{"name": "read_file"}]


def test_a_removed_call_is_explained_unless_the_toy_answer_is_structured(explaining):
    assert "[gatekeeper]" in generate(explaining, tools=TOOLS).json()["text"]
    assert generate(explaining, tools=TOOLS, format="json").json()["text"] == "done"


def test_the_toy_credential_header_names_the_client_when_sent_natively(toy, upstream, store_path):
    native = settings_for(upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "protocols": ["toy"]})
    assert client_identity({"x-api-key": "k1"}, native, protocol="toy") != ANONYMOUS
    assert (
        client_identity({"x-api-key": "k1"}, native, protocol="chat") == ANONYMOUS
    )  # chat's upstream reads none there
