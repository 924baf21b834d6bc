"""Per-client policy (`clients:`) through the real proxy with the official openai client: a
client named by its credential's SHA-256 gets the stricter of its own rules and the global ones;
any other client gets the global rules; the admin API shows which client got which rule, never
the credential."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from conftest import Proxy, make_profile, running_proxy, seed_store, settings_for
from structlog.testing import capture_logs
from upstreams import NativeServer

from gatekeeper.config import Settings
from gatekeeper.observe.logs import merge_context
from gatekeeper.rules.tiers import Tier

CI_KEY = "sk-ci-bot-credential"
ADMIN = "admin-key-for-tests"
TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {"path": {}}}}}
    for n in ("read_file", "execute_command", "deploy")
]
CLIENTS = {
    "ci-bot": {
        "match": {"credential_sha256": hashlib.sha256(CI_KEY.encode()).hexdigest()},
        "tools": {"deny": ["execute_command"]},
        "max_tier": "medium",
        "arguments": {"read_file": [{"match": {"path": "/secrets/*"}, "tier": "large"}]},
    }
}


@pytest.fixture
def upstream() -> Iterator[NativeServer]:
    with NativeServer() as server:
        yield server


@pytest.fixture
def proxy(upstream, store_path, default_suite) -> Iterator[Proxy]:
    seed_store(store_path, make_profile("big-model", Tier.LARGE, default_suite))
    settings = settings_for(
        upstream.base_url,
        store_path,
        upstream={"base_url": upstream.base_url},  # no operator key: the client's own is what is checked
        tools={"default_tier": "small", "required_tier": {"execute_command": "large", "deploy": "medium"}},
        clients=CLIENTS,
        admin_key=ADMIN,
    )
    with running_proxy(settings) as running:
        yield running


def client(proxy: Proxy, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=key, max_retries=0, timeout=30)


def ask(proxy: Proxy, key: str) -> Any:
    return client(proxy, key).chat.completions.with_raw_response.create(
        model="big-model", messages=[{"role": "user", "content": "go"}], tools=TOOLS
    )


def offered(upstream: NativeServer) -> list[str]:
    return [t["function"]["name"] for t in upstream.requests[-1]["tools"]]


def test_a_configured_client_gets_the_stricter_rules(proxy, upstream):
    raw = ask(proxy, CI_KEY)
    assert raw.headers["x-gatekeeper-tier"] == "medium"  # its ceiling, below the model's large
    assert offered(upstream) == ["read_file", "deploy"]  # execute_command denied to it


def test_any_other_client_gets_the_global_rules(proxy, upstream):
    raw = ask(proxy, "sk-someone-else")
    assert raw.headers["x-gatekeeper-tier"] == "large"
    assert offered(upstream) == ["read_file", "execute_command", "deploy"]


def test_a_clients_argument_rules_judge_its_calls(proxy, upstream):
    upstream.responder = lambda body: {
        "content": None,
        "tool_calls": [
            {"name": "read_file", "arguments": {"path": "/secrets/token"}},
            {"name": "read_file", "arguments": {"path": "/tmp/a"}},
        ],
    }
    mine = ask(proxy, CI_KEY).parse().choices[0].message
    assert [json.loads(c.function.arguments)["path"] for c in mine.tool_calls] == ["/tmp/a"]
    theirs = ask(proxy, "sk-someone-else").parse().choices[0].message
    assert len(theirs.tool_calls) == 2  # the global rules have no argument rule for read_file


def test_a_denied_tool_call_in_an_answer_is_removed(proxy, upstream):
    upstream.responder = lambda body: {"content": None, "tool_calls": [{"name": "execute_command", "arguments": {}}]}
    raw = ask(proxy, CI_KEY)
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"
    assert not raw.parse().choices[0].message.tool_calls


def test_the_admin_api_shows_which_client_got_which_rule_and_never_its_credential(proxy, upstream):
    with capture_logs(processors=[merge_context]) as logs:
        ask(proxy, CI_KEY)
        ask(proxy, CI_KEY)
        ask(proxy, "sk-someone-else")
    doc = httpx.get(proxy.url + "/admin/clients", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10).json()
    (row,) = doc["clients"]
    assert row == {
        "client": "ci-bot",
        "matched_by": "credential_sha256",
        "allow": None,
        "deny": ["execute_command"],
        "max_tier": "medium",
        "arguments": ["read_file"],
        "requests": 2,
    }
    digest = hashlib.sha256(CI_KEY.encode()).hexdigest()
    shown = json.dumps(doc) + json.dumps(logs, default=str)
    assert CI_KEY not in shown and digest not in shown
    assert any(entry.get("client_policy") == "ci-bot" for entry in logs)
    assert httpx.get(proxy.url + "/admin/clients", timeout=10).status_code == 401


@pytest.mark.parametrize(
    ("clients", "says"),
    [
        ({"x": {"match": {"credential_sha256": "abc"}}}, "64 hex digits"),
        ({"x": {"match": {}}}, "exactly one of"),
        ({"x": {"match": {"header": "team-a"}}}, "drift.client_header"),
        ({"bad name!": {"match": {"credential_sha256": "a" * 64}}}, "client's name"),
        ({"x": {"match": {"credential_sha256": "a" * 64}}, "drift": {"client_header": "x-team"}}, "match by header"),
        (
            {"a": {"match": {"credential_sha256": "a" * 64}}, "b": {"match": {"credential_sha256": "A" * 64}}},
            "matches the same client as a",
        ),
        ({"x": {"match": {"credential_sha256": "a" * 64}, "max_tier": "huge"}}, "max_tier"),
    ],
)
def test_a_bad_client_entry_is_refused(clients, says):
    drift = clients.pop("drift", None)
    with pytest.raises(ValueError, match=says):
        Settings.model_validate({"clients": clients} | ({"drift": drift} if drift else {}))


def test_the_console_shows_each_client_and_its_rules_never_its_credential(proxy, upstream):
    ask(proxy, CI_KEY)
    with httpx.Client(base_url=proxy.url, timeout=30) as browser:
        signed = browser.post("/admin/login", data={"key": ADMIN}, headers={"origin": proxy.url})
        assert signed.status_code == 303
        page = browser.get("/admin/").text
    section = page.split('<h2 id="clients">', 1)[1]
    row = section.split("<td><code>ci-bot</code></td>", 1)[1].split("</tr>", 1)[0]
    assert "credential_sha256" in row and "<code>execute_command</code>" in row and "medium" in row
    assert '<td class="num">1</td>' in row
    assert CI_KEY not in page and hashlib.sha256(CI_KEY.encode()).hexdigest() not in page
