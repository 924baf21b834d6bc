"""The contract of ../shared/DESIGN.md as outside code reads it: the real `gatekeeper` command in a
subprocess (temp store, scripted upstream), the real proxy on a real port with the official
clients, the public Python API. One documented behaviour per test; docs/contract.md's "changes to
the contract" list says where this round departs from DESIGN.md on purpose."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
import openai
import pytest
import yaml
from conftest import make_profile, measuring_upstream, running_proxy, seed_store, settings_for, tool
from scripted import ScriptedServer

import gatekeeper
from gatekeeper import Gatekeeper, JsonFileStore, Profile, Tier, ToolRegistry

CODE = Path(gatekeeper.__file__).resolve().parent.parent  # the subprocess runs the code the tests import
PROFILE_FIELDS = {
    "model",
    "provider",
    "tier",
    "scores",
    "tokensPerSecond",
    "testedAt",
    "benchmarkVersion",
    "testsHash",
    "testResults",
    "reasoningEffort",
    "avgCompletionTokens",
}


def cli(*args: str | Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`gatekeeper ARGS` as outside code runs it: no terminal, the default width (80 columns)."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")} | {"PYTHONPATH": str(CODE)}
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


def config_file(tmp_path: Path, **doc: object) -> Path:
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


# -- suite files and `gatekeeper suite` ------------------------------------------------------


def _test_file(name: str, **changes: object) -> str:
    doc = {"name": name, "category": "json", "prompt": "Answer with {}.", "checks": [{"type": "json_valid"}]}
    return json.dumps(doc | changes)


def test_suite_hash_is_md5_over_sorted_names_then_bytes(tmp_path):
    (tmp_path / "20_b.json").write_text(_test_file("b"))
    (tmp_path / "10_a.json").write_text(_test_file("a"))
    (tmp_path / "notes.txt").write_text("not a test file: not hashed")
    digest = hashlib.md5()
    for path in sorted(tmp_path.glob("*.json"), key=lambda p: p.name):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    done = cli("suite", "hash", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == digest.hexdigest()[:8]


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (_test_file("a", checks=[{"type": "telepathy"}]), "telepathy"),
        (json.dumps({"name": "a", "category": "json", "checks": [{"type": "json_valid"}]}), "prompt"),
        (_test_file("a", category="maths"), "category"),
        ('{"name": "a",', "malformed JSON"),
    ],
    ids=["unknown check type", "missing prompt", "bad category", "malformed JSON"],
)
def test_suite_validate_fails_with_file_colon_why_on_one_line(tmp_path, text, why):
    (tmp_path / "10_good.json").write_text(_test_file("good"))
    (tmp_path / "20_bad.json").write_text(text)
    done = cli("suite", "validate", tmp_path)
    assert done.returncode == 1
    # One line, whatever the terminal's width: scripts grep for "FILE: why".
    line = next(line for line in done.stderr.splitlines() if "20_bad.json" in line)
    assert "20_bad.json: " in line and why in line.split("20_bad.json: ", 1)[1]
    assert cli("suite", "validate", tmp_path / "missing").returncode != 0


def test_a_bad_invocation_exits_2_naming_what_is_wrong():
    done = cli("bench")
    assert done.returncode == 2 and "MODEL" in done.stderr
    assert cli("bench", "m", "--effort", "low,low").returncode == 2


def test_suite_validate_accepts_a_valid_suite_with_exit_0(tmp_path):
    (tmp_path / "10_a.json").write_text(_test_file("a", vars={"n": {"int": [2, 99]}}, prompt="Give {{n + 3}}."))
    done = cli("suite", "validate", tmp_path)
    assert done.returncode == 0, done.stderr


# -- `gatekeeper bench` -----------------------------------------------------------------------


def _point_estimate_config(tmp_path: Path, upstream: ScriptedServer, store: Path, **bench: object) -> Path:
    """bench.risk 1: the tier on the point estimate (the seed's rule), so a perfect model is large
    after one sample; no retries, so a failing backend fails at once."""
    return config_file(
        tmp_path,
        upstream={"base_url": upstream.base_url},
        store=str(store),
        bench={"risk": 1, "max_retries": 0, "retry_after_s": 0.1, "timeout_s": 20} | bench,
    )


def test_bench_json_prints_one_object_and_stores_the_seed_format(tmp_path, default_suite):
    store = tmp_path / "models_profile.json"
    with measuring_upstream(default_suite, models=("m-a",)) as upstream:
        config = _point_estimate_config(tmp_path, upstream, store)
        done = cli("bench", "m-a", "--config", config, "--effort", "default,low,medium", "--samples", "1", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # stdout holds the JSON object only: progress went to stderr
    assert list(doc) == ["results"] and len(doc["results"]) == 1
    result = doc["results"][0]
    assert result["model"] == "m-a"
    assert [p["reasoningEffort"] for p in result["profiles"]] == ["default", "low", "medium"]
    # the cheapest explicit level reaching the highest tier seen ("default" is not explicit)
    assert result["recommendedEffort"] == "low"
    for profile in result["profiles"]:
        assert set(profile) >= PROFILE_FIELDS
        assert profile["tier"] == "large"
        assert set(profile["scores"]) == {"instruction", "json", "toolCalling"}
        assert profile["testsHash"] == default_suite.hash and profile["benchmarkVersion"] == default_suite.version
        assert {"name", "category", "score"} <= set(profile["testResults"][0])
        for category, (low, high) in profile["scoreIntervals"].items():
            assert 0 <= low <= profile["scores"][category] <= high <= 1
    stored = json.loads(store.read_text())
    assert set(stored) == {"profiles", "recommendations"}
    assert set(stored["profiles"]) == {"m-a@default", "m-a@low", "m-a@medium"}
    assert stored["recommendations"] == {"m-a": "low"}
    assert stored["profiles"]["m-a@low"] == result["profiles"][1]
    assert "m-a@" in done.stderr  # the progress


def test_bench_without_effort_sweeps_the_five_levels(tmp_path, default_suite):
    store = tmp_path / "models_profile.json"
    with measuring_upstream(default_suite, models=("m-a",)) as upstream:
        config = _point_estimate_config(tmp_path, upstream, store)
        done = cli("bench", "m-a", "--config", config, "--samples", "1")
        sent = {body.get("reasoning_effort", "(none)") for body in upstream.requests}
    assert done.returncode == 0, done.stderr
    keys = set(json.loads(store.read_text())["profiles"])
    assert keys == {f"m-a@{e}" for e in ("default", "none", "low", "medium", "xhigh")}
    assert sent == {"(none)", "none", "low", "medium", "xhigh"}  # default = no effort field sent
    assert "recommended effort for m-a" in done.stdout


def test_bench_all_measures_every_listed_model(tmp_path, default_suite):
    store = tmp_path / "models_profile.json"
    with measuring_upstream(default_suite, models=("m-a", "m-b")) as upstream:
        config = _point_estimate_config(tmp_path, upstream, store)
        done = cli("bench", "--all", "--config", config, "--effort", "low", "--samples", "1", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["model"] for r in json.loads(done.stdout)["results"]] == ["m-a", "m-b"]
    assert set(json.loads(store.read_text())["profiles"]) == {"m-a@low", "m-b@low"}


def test_bench_exits_non_zero_and_stores_nothing_when_the_backend_fails(tmp_path):
    store = tmp_path / "models_profile.json"
    with ScriptedServer(lambda body: {"status": 500, "error": "down"}) as upstream:
        config = _point_estimate_config(tmp_path, upstream, store)
        done = cli("bench", "m-a", "--config", config, "--effort", "low", "--samples", "1", "--json")
    assert done.returncode == 1
    assert not store.exists() or json.loads(store.read_text())["profiles"] == {}


def test_bench_base_url_and_store_flags_override_the_config(tmp_path, default_suite):
    store = tmp_path / "flag_store.json"
    with measuring_upstream(default_suite, models=("m-a",)) as upstream:
        config = config_file(tmp_path, upstream={"base_url": "http://127.0.0.1:9/v1"}, bench={"risk": 1})
        done = cli(
            "bench", "m-a", "--config", config, "--base-url", upstream.base_url, "--store", store,
            "--api-key", "sk-flag", "--effort", "low", "--samples", "1",
        )  # fmt: skip
        keys = {h.get("authorization") for h in upstream.headers}
    assert done.returncode == 0, done.stderr
    assert set(json.loads(store.read_text())["profiles"]) == {"m-a@low"}
    assert keys == {"Bearer sk-flag"}


# -- `gatekeeper profiles`, `store copy`, `tools` ---------------------------------------------


def test_profiles_json_is_the_store_format_and_store_copy_copies_it(tmp_path, default_suite):
    source, target = tmp_path / "a.json", tmp_path / "b.json"
    seed_store(source, make_profile("org/m@x", Tier.MEDIUM, default_suite, effort="low"))
    done = cli("profiles", "--store", source, "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["profiles"]["org/m@x@low"]["model"] == "org/m@x"  # a key splits on its last '@'
    assert doc["profiles"]["org/m@x@low"]["reasoningEffort"] == "low"
    assert "recommendations" in doc
    copied = cli("store", "copy", source, target)
    assert copied.returncode == 0, copied.stderr
    assert json.loads(target.read_text())["profiles"].keys() == {"org/m@x@low"}


def test_tools_says_which_tools_a_model_gets(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite, effort="low"))
    rules = {"default_tier": "small", "required_tier": {"execute_command": "large", "write_*": "medium"}}
    config = config_file(tmp_path, upstream={"base_url": "http://127.0.0.1:9/v1"}, store=str(store), tools=rules)
    done = cli("tools", "m", "--config", config, "--effort", "low")
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.count("│") >= 3}
    assert "tier medium (measured)" in done.stdout
    assert "hidden" in rows["execute_command"] and "yes" in rows["write_*"]
    unmeasured = cli("tools", "m", "--config", config)  # m@default is not measured: the unknown tier
    assert "tier small (unmeasured)" in unmeasured.stdout


# -- the config file --------------------------------------------------------------------------


def test_the_documented_defaults(tmp_path):
    settings = gatekeeper.load_settings(config_file(tmp_path, upstream={"base_url": "http://127.0.0.1:9/v1"}))
    assert settings.upstream.protocols == ["chat"]
    assert settings.upstream.unknown_fields == "refuse"
    assert settings.unknown_models == "fail_closed" and settings.unknown_tier == Tier.SMALL
    assert settings.wait_timeout_s == 120
    assert settings.tools.default_tier == Tier.SMALL
    assert settings.bench.risk == 0.05
    assert settings.blocked_calls == "explain"
    assert settings.drift.min_clients == 3
    assert settings.routing is None and settings.admin_key is None


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"upstream": {"base_url": "http://x/v1", "protocol": ["chat"]}}, "upstream.protocol"),
        ({"unknown_models": "guess"}, "unknown_models"),
        ({"tools": {"required_tier": {"execute_command": "huge"}}}, "tools.required_tier.execute_command"),
        ({"bench": {"risk": 0}}, "bench.risk"),
        ({"pins": {"m": "giant"}}, "pins"),
        ({"routing": {"max_effort": "ludicrous"}}, "routing.max_effort"),
        ({"upstream": {"base_url": "http://x/v1", "unknown_fields": "maybe"}}, "upstream.unknown_fields: "),
        ({"blocked_calls": "hide"}, "blocked_calls: "),
        ({"drift": {"min_clients": 0}}, "drift.min_clients: "),
        ({"drift": {"min_calls": 5}}, "drift.min_calls: unknown key"),  # gone this round
        ({"tools": {"requires": {"emit_*": {"maths": 0.9}}}}, "tools.requires.emit_*.maths: "),
        ({"mcp": {"servers": {"files": {}}}}, "mcp.servers.files: "),
        ({"store": "redis://"}, "store: expected a redis URL with a host"),
    ],
)
def test_serve_refuses_a_bad_config_at_start_naming_the_key(tmp_path, doc, path):
    done = cli("serve", "--config", config_file(tmp_path, **doc), "--port", "1", timeout=60)
    assert done.returncode == 2
    assert path in done.stderr  # on one line


def test_a_bad_choice_names_the_value_given(tmp_path):
    done = cli("serve", "--config", config_file(tmp_path, unknown_models="guess"), "--port", "1", timeout=60)
    assert "unknown_models: Input should be 'fail_closed', 'wait' or 'reject', got 'guess'" in done.stderr


def test_environment_variables_fill_the_config(tmp_path, monkeypatch):
    monkeypatch.setenv("C6_UPSTREAM_KEY", "sk-from-env")
    path = tmp_path / "g.yaml"
    path.write_text("upstream:\n  base_url: http://127.0.0.1:9/v1\n  api_key: ${C6_UPSTREAM_KEY}\n")
    assert gatekeeper.load_settings(path).upstream.api_key == "sk-from-env"


# -- the proxy over HTTP ----------------------------------------------------------------------

TOOLS = [tool("read_file", path="string"), tool("execute_command", command="string")]


@pytest.fixture
def proxy(upstream, store_path, default_suite):
    """`small-model` measured small, `pinned-model` pinned medium; a chat-only scripted upstream
    (Responses and Messages are translated to chat)."""
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    settings = settings_for(upstream.base_url, store_path, pins={"pinned-model": "medium"}, admin_key="a" * 24)
    with running_proxy(settings) as running:
        yield running


def _agent_request(upstream: ScriptedServer) -> dict:
    """The last request the client sent (not a lazy measurement's suite prompt)."""
    return next(b for b in reversed(upstream.requests) if b["messages"][-1].get("content") == "hi")


def _sent_tools(upstream: ScriptedServer) -> list[str]:
    return [t["function"]["name"] for t in _agent_request(upstream).get("tools", [])]


def test_chat_plain_and_streamed_is_gated_with_the_gatekeeper_headers(proxy, upstream):
    for stream in (False, True):
        raw = proxy.client.chat.completions.with_raw_response.create(
            model="small-model", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, stream=stream
        )
        assert raw.headers["x-gatekeeper-tier"] == "small"
        assert raw.headers["x-gatekeeper-profile"] == "measured"
        assert raw.headers["x-request-id"]
        assert _sent_tools(upstream) == ["read_file"]
        assert "x-gatekeeper-routed" not in raw.headers  # no `routing:`: never routed


def test_responses_and_messages_are_gated_like_chat(proxy, upstream):
    raw = proxy.client.responses.with_raw_response.create(
        model="small-model",
        input="hi",
        tools=[{"type": "function", "name": t["function"]["name"], "parameters": {}} for t in TOOLS],
    )
    assert raw.headers["x-gatekeeper-tier"] == "small" and _sent_tools(upstream) == ["read_file"]
    claude = anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)
    message = claude.messages.with_raw_response.create(
        model="small-model",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        tools=[{"name": t["function"]["name"], "input_schema": {"type": "object"}} for t in TOOLS],
    )
    assert message.headers["x-gatekeeper-tier"] == "small" and _sent_tools(upstream) == ["read_file"]
    counted = claude.messages.count_tokens(model="small-model", messages=[{"role": "user", "content": "hi"}])
    assert counted.input_tokens >= 0


def test_the_profile_header_names_where_the_tier_came_from(proxy):
    def source(model: str) -> tuple[str, str]:
        raw = proxy.client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": "hi"}], tools=TOOLS
        )
        return raw.headers["x-gatekeeper-tier"], raw.headers["x-gatekeeper-profile"]

    assert source("pinned-model") == ("medium", "pinned")
    # fail_closed: an unknown model gets unknown_tier at once, while it is measured
    tier, profile = source("never-seen")
    assert tier == "small" and profile in ("pending", "unmeasured")


def test_a_removed_call_is_named_in_x_gatekeeper_blocked_calls(store_path, default_suite):
    call = {"content": None, "tool_calls": [{"name": "execute_command", "arguments": {"command": "ls"}}]}
    with ScriptedServer(lambda body: call) as upstream:
        seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
        with running_proxy(settings_for(upstream.base_url, store_path)) as running:
            raw = running.client.chat.completions.with_raw_response.create(
                model="small-model", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
            )
            responses_tools = [{"type": "function", "name": t["function"]["name"], "parameters": {}} for t in TOOLS]
            answer = running.client.responses.with_raw_response.create(
                model="small-model", input="hi", tools=responses_tools
            )
            claude = anthropic.Anthropic(base_url=running.url, api_key="k", max_retries=0)
            message = claude.messages.with_raw_response.create(
                model="small-model",
                max_tokens=64,
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"name": t["function"]["name"], "input_schema": {"type": "object"}} for t in TOOLS],
            )
    assert raw.headers["x-gatekeeper-blocked-calls"] == "execute_command"
    assert not raw.parse().choices[0].message.tool_calls
    assert answer.headers["x-gatekeeper-blocked-calls"] == "execute_command"
    assert not [item for item in answer.parse().output if item.type == "function_call"]
    assert message.headers["x-gatekeeper-blocked-calls"] == "execute_command"
    assert not [block for block in message.parse().content if block.type == "tool_use"]


def test_an_unknown_field_is_refused_naming_it_in_the_openai_error_shape(proxy, upstream):
    before = len(upstream.requests)
    answer = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "small-model", "messages": [{"role": "user", "content": "hi"}], "smuggled_tools": TOOLS},
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert {"message", "type", "code"} <= set(error) and "smuggled_tools" in error["message"]
    assert len(upstream.requests) == before  # never forwarded


def test_unknown_fields_drop_forwards_the_request_without_them(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("small-model", Tier.SMALL, default_suite))
    settings = settings_for(
        upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "unknown_fields": "drop"}
    )
    with running_proxy(settings) as running:
        answer = httpx.post(
            running.url + "/v1/chat/completions",
            json={"model": "small-model", "messages": [{"role": "user", "content": "hi"}], "smuggled": 1},
        )
    assert answer.status_code == 200
    assert "smuggled" not in upstream.requests[-1]


def test_a_forced_hidden_tool_is_a_400(proxy, upstream):
    with pytest.raises(openai.BadRequestError) as refused:
        proxy.client.chat.completions.create(
            model="small-model",
            messages=[{"role": "user", "content": "hi"}],
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "execute_command"}},
        )
    assert "execute_command" in refused.value.message


def test_messages_errors_use_the_anthropic_shape(proxy):
    answer = httpx.post(proxy.url + "/v1/messages", json={"model": "small-model", "max_tokens": 5, "smuggled": 1})
    assert answer.status_code == 400
    body = answer.json()
    assert body["type"] == "error" and {"type", "message"} <= set(body["error"])
    missing = httpx.post(proxy.url + "/v1/messages/nothing-here", json={})
    assert missing.status_code == 404 and missing.json()["type"] == "error"


def test_anything_else_is_a_404_in_the_openai_shape_and_healthz_is_alive(proxy):
    for method, path in (("GET", "/v1/nothing"), ("POST", "/v1/assistants"), ("GET", "/v1/chat/completions/")):
        answer = httpx.request(method, proxy.url + path)
        assert answer.status_code in (404, 405), (method, path)
        assert {"message", "type", "code"} <= set(answer.json()["error"])
        assert answer.headers["x-request-id"]
    assert httpx.get(proxy.url + "/healthz").status_code == 200


def test_models_and_the_tool_free_endpoints_are_forwarded(store_path):
    from scripted import RawAnswer, RawUpstream

    with RawUpstream(RawAnswer(b'{"object": "list", "data": []}')) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as running:
            models = httpx.get(running.url + "/v1/models", headers={"x-request-id": "req-models-1"})
            assert models.status_code == 200 and models.headers["x-request-id"] == "req-models-1"
            assert httpx.get(running.url + "/v1/models/org/some-model").status_code == 200
            assert httpx.post(running.url + "/v1/embeddings", json={"model": "e", "input": "x"}).status_code == 200
            assert httpx.post(running.url + "/v1/completions", json={"model": "c", "prompt": "x"}).status_code == 200
            refused = httpx.post(running.url + "/v1/completions", json={"model": "c", "prompt": "x", "tools": TOOLS})
            assert refused.status_code == 400
    assert upstream.paths == ["/v1/models", "/v1/models/org/some-model", "/v1/embeddings", "/v1/completions"]


def test_the_admin_api_needs_the_key_and_lists_invalidates_and_measures(proxy, default_suite):
    assert httpx.get(proxy.url + "/admin/profiles").status_code == 401
    auth = {"authorization": "Bearer " + "a" * 24}
    listed = httpx.get(proxy.url + "/admin/profiles", headers=auth)
    assert listed.status_code == 200 and "small-model@default" in listed.json()["profiles"]
    entry = listed.json()["profiles"]["small-model@default"]
    assert (entry["tier"], entry["model"], entry["valid"], entry["source"]) == (
        "small",
        "small-model",
        True,
        "measured",
    )
    assert "recommendations" in listed.json()
    started = httpx.post(proxy.url + "/admin/profiles/other-model@low/benchmark", headers=auth)
    assert started.status_code == 202
    deleted = httpx.delete(proxy.url + "/admin/profiles/small-model@default", headers=auth)
    assert deleted.status_code == 200
    assert "small-model@default" not in JsonFileStore(proxy.gk.settings.store).load().profiles
    assert httpx.get(proxy.url + "/admin/", follow_redirects=True).status_code == 200  # the console (its sign-in)


def test_without_admin_key_there_is_no_admin_api(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path)) as running:
        assert httpx.get(running.url + "/admin/profiles").status_code == 404


def test_routing_says_which_pair_answered_in_x_gatekeeper_routed(upstream, store_path, default_suite):
    seed_store(
        store_path,
        make_profile("effortful", Tier.SMALL, default_suite, effort="low"),
        make_profile("effortful", Tier.LARGE, default_suite, effort="high"),
    )
    settings = settings_for(upstream.base_url, store_path, routing={"escalate_effort": True})
    with running_proxy(settings) as running:
        raw = running.client.chat.completions.with_raw_response.create(
            model="effortful", reasoning_effort="low", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
        )
    assert raw.headers["x-gatekeeper-routed"] == "effortful@high"
    assert raw.headers["x-gatekeeper-tier"] == "large"
    assert _agent_request(upstream)["reasoning_effort"] == "high"
    assert _sent_tools(upstream) == ["read_file", "execute_command"]


# -- profiles and the store -------------------------------------------------------------------


def _seed_format(profile: Profile) -> dict:
    doc = profile.to_json()
    for optional in ("samples", "scoreIntervals", "instanceSeed", "effortApplied", "durationS"):
        doc.pop(optional, None)
    return doc


def test_a_seed_format_store_is_read_and_one_bad_entry_is_skipped_and_kept(tmp_path, default_suite):
    store = tmp_path / "models_profile.json"
    good = _seed_format(make_profile("m", Tier.MEDIUM, default_suite, effort="low"))
    stale = _seed_format(make_profile("old", Tier.LARGE, default_suite)) | {"testsHash": "00000000"}
    doc = {
        "profiles": {"m@low": good, "old@default": stale, "broken@default": {"tier": "cosmic"}},
        "recommendations": {"m": "low"},
    }
    store.write_text(json.dumps(doc))
    gk = Gatekeeper(settings_for("http://127.0.0.1:9/v1", store))
    try:
        assert gk.lookup("m", "low").tier == Tier.MEDIUM  # valid: version and hash match
        assert gk.lookup("old", None) is None  # another suite's hash: not valid
        assert gk.lookup("broken", None) is None
        gk.invalidate("m", "low")  # a save keeps the entries it cannot read
    finally:
        gk.close()
    kept = json.loads(store.read_text())["profiles"]
    assert kept["broken@default"] == {"tier": "cosmic"} and "old@default" in kept and "m@low" not in kept


# -- the Python API ---------------------------------------------------------------------------


def test_the_design_snippet_runs_as_written(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("some-model", Tier.MEDIUM, default_suite, effort="low"))
    config = config_file(tmp_path, upstream={"base_url": "http://127.0.0.1:9/v1"}, store=str(store))
    gk = Gatekeeper.from_config(str(config))
    try:
        registry = ToolRegistry(gk)
        registry.register(tool("execute_command", command="string"), required_tier="large")
        registry.register(tool("read_file", path="string"))
        tools = registry.list_for_llm("some-model", effort="low")
        assert [t["function"]["name"] for t in tools] == ["read_file"]
        tools = asyncio.run(registry.alist_for_llm("some-model", effort="low"))
        assert [t["function"]["name"] for t in tools] == ["read_file"]
    finally:
        gk.close()


def test_the_public_names_and_their_signatures():
    for name in ("Gatekeeper", "ToolRegistry", "Tier", "Profile", "ProfileStore", "JsonFileStore", "Settings"):
        assert name in gatekeeper.__all__
    assert list(inspect.signature(ToolRegistry.list_for_llm).parameters) == ["self", "model", "effort"]
    assert list(inspect.signature(ToolRegistry.alist_for_llm).parameters) == ["self", "model", "effort"]
    assert list(inspect.signature(ToolRegistry.register).parameters)[:3] == ["self", "schema", "required_tier"]


def test_tiers_are_ordered_by_trust():
    assert sorted([Tier.LARGE, Tier.SMALL, Tier.MEDIUM]) == [Tier.SMALL, Tier.MEDIUM, Tier.LARGE]
    assert Tier.SMALL < Tier.MEDIUM < Tier.LARGE and max(Tier) == Tier.LARGE
    assert Tier.LARGE >= "medium" and Tier("small") == "small"


def test_a_model_name_may_contain_at_and_the_effort_is_keyed_as_sent(upstream, store_path, default_suite):
    seed_store(store_path, make_profile("org/m@v2", Tier.MEDIUM, default_suite, effort="low"))
    with running_proxy(settings_for(upstream.base_url, store_path)) as running:
        raw = running.client.chat.completions.with_raw_response.create(
            model="org/m@v2", reasoning_effort="low", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
        )
        assert (raw.headers["x-gatekeeper-tier"], raw.headers["x-gatekeeper-profile"]) == ("medium", "measured")
        assert _agent_request(upstream)["reasoning_effort"] == "low"  # forwarded as sent
        # no effort: the key org/m@v2@default, not measured
        raw = running.client.chat.completions.with_raw_response.create(
            model="org/m@v2", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
        )
        assert raw.headers["x-gatekeeper-tier"] == "small" and raw.headers["x-gatekeeper-profile"] != "measured"
        assert "reasoning_effort" not in _agent_request(upstream)


def test_a_safe_client_request_id_is_kept(proxy):
    answer = httpx.post(
        proxy.url + "/v1/chat/completions",
        json={"model": "small-model", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-request-id": "req-contract-1"},
    )
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "req-contract-1"


def test_unknown_models_reject_is_a_503_and_nothing_is_forwarded(upstream, store_path):
    with running_proxy(settings_for(upstream.base_url, store_path, unknown_models="reject")) as running:
        with pytest.raises(openai.APIStatusError) as refused:
            running.client.chat.completions.create(model="never-seen", messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == 503
    assert not [b for b in upstream.requests if b["messages"][-1].get("content") == "hi"]


def test_unknown_models_wait_serves_the_measured_tier(store_path, default_suite):
    with measuring_upstream(default_suite) as upstream:
        settings = settings_for(
            upstream.base_url, store_path, unknown_models="wait", bench={"risk": 1, "samples": 1, "max_retries": 0}
        )
        with running_proxy(settings) as running:
            raw = running.client.chat.completions.with_raw_response.create(
                model="fresh-model", messages=[{"role": "user", "content": "hi"}], tools=TOOLS
            )
    assert (raw.headers["x-gatekeeper-tier"], raw.headers["x-gatekeeper-profile"]) == ("large", "measured")
    assert "fresh-model@default" in JsonFileStore(store_path).load().profiles


# -- the suite DSL, scored through the real command -------------------------------------------

_WRITE_FILE = tool("write_file", path="string", n="integer")
DSL_SUITE = {
    "10_words.json": {
        "name": "words",
        "category": "instruction",
        "prompt": "Say hello.",
        "checks": [
            {"type": "contains", "value": "HELLO"},  # case-insensitive by default: passes
            {"type": "regex", "value": "HELLO", "weight": 2},  # no flags by default: fails
            {"type": "regex", "value": "HELLO", "flags": "i"},
            {"type": "word_count", "value": 2},
        ],
    },
    "11_heavy.json": {
        "name": "heavy",
        "category": "instruction",
        "weight": 3,
        "prompt": "Say anything.",
        "checks": [{"type": "not_empty"}],
    },
    "20_json.json": {
        "name": "json",
        "category": "json",
        "prompt": "Give the total.",
        "checks": [
            {"type": "json_valid"},  # after a citation, with a trailing comma repaired
            {"type": "json_path_equals", "path": "total", "value": 56},
            {"type": "json_path_length", "path": "items", "value": 2},
            {"type": "json_path_type", "path": "items[0]", "value": "number"},
            {"type": "json_path_equals", "path": "total", "value": 57},  # fails
        ],
    },
    "30_tool.json": {
        "name": "tool",
        "category": "toolCalling",
        "tools": [_WRITE_FILE],
        "steps": [
            {
                "prompt": "Write the log.",
                "checks": [
                    {"type": "tool_called", "value": "write_file"},
                    {"type": "tool_arg_regex", "arg": "path", "value": "^server\\.log$"},  # flags i by default
                    {"type": "tool_arg_equals", "arg": "n", "value": 3},
                    {"type": "tool_not_called", "value": "delete_file"},
                    {"type": "tool_arg_equals", "arg": "path", "value": "server.log"},  # exact: fails
                ],
            }
        ],
    },
}
DSL_ANSWERS = {
    "Say hello.": {"content": "hello world"},
    "Say anything.": {"content": "anything"},
    "Give the total.": {"content": 'Note [1]: {"total": 56, "items": [1, 2,]}'},
    "Write the log.": {
        "content": None,
        "tool_calls": [{"name": "write_file", "arguments": {"path": "Server.LOG", "n": 3}}],
    },
}


def test_suite_files_score_as_the_seed_describes(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name, doc in DSL_SUITE.items():
        (suite / name).write_text(json.dumps(doc))
    store = tmp_path / "p.json"
    with ScriptedServer(lambda body: DSL_ANSWERS[body["messages"][-1]["content"]]) as upstream:
        # The tool budget's instances are not this suite's: its answers know the suite only.
        config = _point_estimate_config(tmp_path, upstream, store, tool_budget=False)
        done = cli(
            "bench", "m", "--config", config, "--suite", suite, "--effort", "default", "--samples", "1", "--json"
        )
    assert done.returncode == 0, done.stderr
    (profile,) = json.loads(done.stdout)["results"][0]["profiles"]
    tests = {t["name"]: t["score"] for t in profile["testResults"]}
    # a test: the weighted fraction of its checks; a category: the weighted average of its tests
    assert tests == pytest.approx({"words": 0.6, "heavy": 1.0, "json": 0.8, "tool": 0.8})
    assert profile["scores"] == pytest.approx({"instruction": 0.9, "json": 0.8, "toolCalling": 0.8})
    assert profile["tier"] == "medium"  # toolCalling 0.8 >= 0.6, json 0.8 >= 0.5; not >= 0.9 for large
    assert profile["testsHash"] == cli("suite", "hash", suite).stdout.strip()


def test_randomised_tests_draw_vars_with_arithmetic_and_store_the_seed(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    doc = {
        "name": "adder",
        "category": "instruction",
        "vars": {"n": {"int": [2, 99]}, "word": {"choice": ["alpha", "beta"]}},
        "prompt": "Add 3 to {{n}} and then say {{word}}.",
        "checks": [{"type": "regex", "value": "^{{n + 3}} {{word}}$"}],
    }
    (suite / "10_adder.json").write_text(json.dumps(doc))
    # fixed tests in the other categories, all passed: no tier is settled or out of reach in
    # three samples at the default risk, so every sample runs
    (suite / "20_json.json").write_text(_test_file("j", prompt="Give {}."))
    tool_test = {"name": "t", "category": "toolCalling", "tools": [_WRITE_FILE], "prompt": "Call write_file."}
    tool_test["checks"] = [{"type": "tool_called", "value": "write_file"}]
    (suite / "30_tool.json").write_text(json.dumps(tool_test))

    def adder(body: dict) -> dict:
        prompt = body["messages"][-1]["content"]
        if prompt == "Give {}.":
            return {"content": "{}"}
        if prompt == "Call write_file.":
            return {"content": None, "tool_calls": [{"name": "write_file", "arguments": {"path": "a", "n": 1}}]}
        words = prompt.rstrip(".").split()
        return {"content": f"{int(words[3]) + 3} {words[-1]}"}

    store = tmp_path / "p.json"
    with ScriptedServer(adder) as upstream:
        config = config_file(
            tmp_path,
            upstream={"base_url": upstream.base_url},
            store=str(store),
            bench={"max_retries": 0, "design": "whole", "tool_budget": False},  # the adder answers this suite only
        )
        args = ("bench", "m", "--config", config, "--suite", suite, "--effort", "low", "--samples", "3", "--json")
        done = cli(*args, "--seed", "1234")
        prompts = [b["messages"][-1]["content"] for b in upstream.requests]
    assert done.returncode == 0, done.stderr
    (profile,) = json.loads(done.stdout)["results"][0]["profiles"]
    assert profile["instanceSeed"] == 1234 and profile["samples"] == 3
    assert profile["testResults"][0] == {"name": "adder", "category": "instruction", "score": 1.0}
    drawn = [p for p in prompts if p.startswith("Add 3")]
    assert len(drawn) == 3 and all("{{" not in p for p in drawn)
    assert len(set(drawn)) > 1  # a fresh instance each sample
    assert profile["testsHash"] == cli("suite", "hash", suite).stdout.strip()  # the file as written


@pytest.mark.parametrize(
    "answer",
    [
        (502, b"<html>bad gateway</html>", "text/html", {}),
        (400, b'{"detail": "nope"}', "application/json", {}),  # another server's error shape
        (
            429,
            b'{"error": {"message": "slow down", "type": "rate_limit", "code": "rl"}}',
            "application/json",
            {"retry-after": "3"},
        ),
    ],
    ids=["not JSON", "another shape", "rate limited"],
)
def test_upstream_errors_reach_each_client_in_its_own_error_shape(store_path, default_suite, answer):
    from scripted import RawAnswer, RawUpstream

    status, raw, content_type, headers = answer
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    with RawUpstream(RawAnswer(raw, status=status, content_type=content_type, headers=headers)) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path)) as running:
            chat = httpx.post(
                running.url + "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            message = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
            claude = httpx.post(running.url + "/v1/messages", json=message)
    assert chat.status_code == claude.status_code == status
    assert isinstance(chat.json()["error"]["message"], str) and "type" in chat.json()["error"]
    assert claude.json()["type"] == "error" and isinstance(claude.json()["error"]["message"], str)
    for relayed in (chat, claude):
        assert relayed.headers.get("retry-after") == headers.get("retry-after")
        assert relayed.headers["x-gatekeeper-tier"] == "small"


def test_piped_tables_keep_whole_keys_and_names(tmp_path, default_suite):
    """Outside a terminal (a script reading stdout) rich's 80 columns cut keys to "m-a@…"."""
    store = tmp_path / "p.json"
    model = "organisation/a-rather-long-model-name-for-a-table"
    seed_store(store, make_profile(model, Tier.MEDIUM, default_suite, effort="low"))
    listed = cli("profiles", "--store", store)
    assert listed.returncode == 0, listed.stderr
    assert f"{model}@low" in listed.stdout
    config = config_file(
        tmp_path,
        upstream={"base_url": "http://127.0.0.1:9/v1"},
        store=str(store),
        tools={"required_tier": {"a_tool_with_quite_a_long_name_indeed": "large"}},
    )
    shown = cli("tools", model, "--config", config, "--effort", "low")
    assert "a_tool_with_quite_a_long_name_indeed" in shown.stdout and f"{model}@low: tier medium" in shown.stdout


def test_the_stored_tier_is_the_one_its_lower_bounds_certify(tmp_path, default_suite):
    """Default settings (bench.risk 0.05): `scoreIntervals[c][0]` is the bound the tier was decided
    on, `scores` the point estimate inside the interval."""
    from gatekeeper.rules.tiers import certified_tier

    store = tmp_path / "p.json"
    with measuring_upstream(default_suite, models=("m-a",)) as upstream:
        config = config_file(tmp_path, upstream={"base_url": upstream.base_url}, store=str(store))
        done = cli("bench", "m-a", "--config", config, "--effort", "low", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    (profile,) = json.loads(done.stdout)["results"][0]["profiles"]
    lower = {c: low for c, (low, _) in profile["scoreIntervals"].items()}
    assert profile["tier"] == certified_tier(lower).value == "large"  # a perfect model, certified
    assert profile["samples"] > 1
    assert all(lower[c] <= profile["scores"][c] <= profile["scoreIntervals"][c][1] for c in lower)
