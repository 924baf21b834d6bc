"""Error bodies name no upstream address, credential or internal path; the log line does
(issue 43). Through the real proxy on a real port, with the official openai client: an
unreachable upstream, a slow one, a litellm route whose provider is down (the MCP door's:
tests/mcp/test_mcp_error_bodies.py)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import structlog
from conftest import make_profile, running_proxy, seed_store, settings_for, wait_until
from scripted import RawAnswer, RawUpstream, ScriptedServer, chat_chunk, chat_completion, free_port, sse

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


class Leaky:
    """An upstream whose errors quote what the proxy sent it: the operator's key, its own URL
    (plain and JSON-escaped) and its `host:port`, as a gateway in front of a model may."""

    def __init__(self) -> None:
        self.upstream = RawUpstream(self.answer)
        self.kind = "json"

    def quoted(self) -> str:
        url = self.upstream.base_url
        escaped = url.replace("/", "\\/")
        return f"backend {url}/chat/completions at 127.0.0.1:{self.upstream.port} ({escaped}) for Bearer {OPERATOR_KEY}"

    def answer(self, body: dict) -> RawAnswer:
        error = {"error": {"message": self.quoted(), "type": "server_error"}}
        if self.kind == "stream":  # one chunk, then the error in the stream, as vLLM and LiteLLM send it
            return RawAnswer(sse(chat_chunk({"role": "assistant", "content": "Hel"}), error), 200, "text/event-stream")
        if self.kind == "stream-500":
            return RawAnswer(sse(error, done=False), 500, "text/event-stream")
        if self.kind == "ok-with-key":
            return RawAnswer(json.dumps(chat_completion({"content": f"your key is {OPERATOR_KEY}"})).encode())
        if self.kind == "ok-with-key-header":  # a 2xx whose header echoes the credential it was sent
            headers = {"x-echo": f"Bearer {OPERATOR_KEY}"}
            return RawAnswer(json.dumps(chat_completion({"content": "hi"})).encode(), headers=headers)
        return RawAnswer(json.dumps(error).encode(), 401)

    def private(self) -> list[str]:
        return [OPERATOR_KEY, str(self.upstream.port), "127.0.0.1"]


def leaky_proxy(store_path, default_suite, leaky: Leaky):
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    upstream = {"base_url": leaky.upstream.base_url, "api_key": OPERATOR_KEY}
    return running_proxy(settings_for(leaky.upstream.base_url, store_path, upstream=upstream))


def test_an_error_in_the_middle_of_a_stream_names_no_key_and_no_address_on_every_route(store_path, default_suite):
    leaky = Leaky()
    leaky.kind = "stream"
    with leaky.upstream, leaky_proxy(store_path, default_suite, leaky) as proxy:
        seen = {}
        for path, body in (
            ("/v1/chat/completions", {"model": "m", "messages": HI, "stream": True}),
            ("/v1/responses", {"model": "m", "input": "hi", "stream": True}),
            ("/v1/messages", {"model": "m", "max_tokens": 5, "messages": HI, "stream": True}),
        ):
            answer = httpx.post(proxy.url + path, json=body, headers={"anthropic-version": "2023-06-01"}, timeout=30)
            seen[path] = answer.text
    for path, text in seen.items():
        assert "error" in text and "***" in text, (path, text)
        for private in leaky.private():
            assert private not in text, (path, private, text)


def test_a_tool_free_route_streams_no_error_with_the_key_and_a_plain_answer_never_carries_it(store_path, default_suite):
    leaky = Leaky()
    with leaky.upstream, leaky_proxy(store_path, default_suite, leaky) as proxy:
        leaky.kind = "stream-500"
        streamed = httpx.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "hi", "stream": True})
        leaky.kind = "json"
        error = refused(proxy)
        leaky.kind = "ok-with-key"
        client = openai.OpenAI(base_url=proxy.url + "/v1", api_key="client-key", max_retries=0, timeout=60)
        answer = client.chat.completions.create(model="m", messages=HI)
    assert streamed.status_code == 500 and "***" in streamed.text
    assert error.status_code == 401 and "***" in shown(error)
    for private in leaky.private():
        assert private not in streamed.text and private not in shown(error), private
    assert answer.choices[0].message.content == "your key is ***"


def test_the_admin_api_names_no_config_path_no_key_in_a_quoted_line_and_no_store_path(store_path, default_suite):
    admin = {"Authorization": "Bearer admin-key-0123456789abcdef"}
    config = store_path.with_name("private-gatekeeper.yaml")
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    settings = settings_for("http://127.0.0.1:9/v1", store_path, admin_key=admin["Authorization"][7:])
    config.write_text(json.dumps(settings.model_dump(mode="json")))
    with running_proxy(settings, config_path=config) as proxy, structlog.testing.capture_logs() as lines:
        config.write_text(f'upstream:\n  api_key: "{OPERATOR_KEY}\nstore: x\n')  # an unclosed quote
        broken = httpx.post(proxy.url + "/admin/reload", headers=admin, timeout=10)
        config.write_text("upstream: {nope_key: 1}\n")
        unknown = httpx.post(proxy.url + "/admin/reload", headers=admin, timeout=10)
        store_path.write_text("not a store at all")  # a mistyped --store path is never replaced
        invalidated = httpx.delete(proxy.url + "/admin/profiles/m@default", headers=admin, timeout=10)
    assert broken.status_code == 400 and "not valid YAML: line 4, column 1" in broken.text
    assert unknown.status_code == 400 and "upstream.nope_key: unknown key" in unknown.text
    assert invalidated.status_code == 503 and "the profile store cannot be changed now" in invalidated.text
    for answer in (broken, unknown, invalidated):
        for private in (OPERATOR_KEY, str(config.parent), str(store_path)):
            assert private not in answer.text, (private, answer.text)
    logged = json.dumps([e for e in lines if e["event"] in ("config_refused", "store_unavailable")])
    assert str(config) in logged and str(store_path) in logged and OPERATOR_KEY not in logged


def test_a_tool_free_route_relays_no_header_of_an_error_that_names_the_upstream_or_the_key(store_path, default_suite):
    where: list[RawUpstream] = []

    def answer(body: dict) -> RawAnswer:
        url = where[0].base_url
        headers = {"www-authenticate": f'Bearer realm="{url}" key="{OPERATOR_KEY}"', "x-served-by": url}
        return RawAnswer(b'{"error": {"message": "no"}}', 401, headers=headers | {"retry-after": "3"})

    with RawUpstream(answer) as upstream:
        where.append(upstream)
        seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
        settings = settings_for(
            upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "api_key": OPERATOR_KEY}
        )
        with running_proxy(settings) as proxy:
            models = httpx.get(proxy.url + "/v1/models", timeout=10)
            embedded = httpx.post(proxy.url + "/v1/embeddings", json={"model": "m", "input": "x"}, timeout=10)
    for answer in (models, embedded):
        assert answer.status_code == 401 and answer.headers["retry-after"] == "3"
        shown_headers = json.dumps(dict(answer.headers))
        for private in (OPERATOR_KEY, str(upstream.port)):
            assert private not in shown_headers, (private, shown_headers)


def test_the_console_shows_a_failed_measurement_without_the_upstream_s_address(store_path, default_suite):
    port, admin_key = free_port(), "admin-key-0123456789abcdef"
    seed_store(store_path, make_profile("m", Tier.SMALL, default_suite))
    settings = settings_for(f"http://127.0.0.1:{port}/v1", store_path, admin_key=admin_key)
    with running_proxy(settings) as proxy, structlog.testing.capture_logs() as lines:
        started = httpx.post(
            proxy.url + "/admin/profiles/new-model@default/benchmark", headers={"Authorization": f"Bearer {admin_key}"}
        )
        console = httpx.Client(base_url=proxy.url, timeout=10)
        console.post("/admin/login", data={"key": admin_key}, headers={"origin": proxy.url})

        def failed() -> dict | None:
            shown = console.get("/admin/progress.json").json()["measurements"]
            return next((m for m in shown if m["state"] == "failed"), None)

        measurement = wait_until(failed, "the measurement to fail")
    assert started.status_code == 202 and "connection failed" in measurement["error"]
    assert str(port) not in measurement["error"] and "127.0.0.1" not in measurement["error"], measurement
    (line,) = [e for e in lines if e["event"] == "measurement_failed"]
    assert f"127.0.0.1:{port}" in line["error"]


def test_a_header_of_a_2xx_answer_that_echoes_the_operator_s_key_loses_it(store_path, default_suite):
    leaky = Leaky()
    leaky.kind = "ok-with-key-header"
    with leaky.upstream, leaky_proxy(store_path, default_suite, leaky) as proxy:
        chat = httpx.post(proxy.url + "/v1/chat/completions", json={"model": "m", "messages": HI})
        forwarded = httpx.post(proxy.url + "/v1/completions", json={"model": "m", "prompt": "hi"})
    for answer in (chat, forwarded):
        assert answer.status_code == 200 and answer.headers["x-echo"] == "Bearer ***"
