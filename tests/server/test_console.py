"""The admin console over real HTTP: sign-in, sessions, CSRF and what the pages show.

The browser-driven flow is in test_console_browser.py; these pin the security rules one by one
with a plain HTTP client, and the page content that needs no script.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from answers import no_tool_calls, perfect
from conftest import make_profile, running_proxy, seed_store, settings_for, wait_until
from redis_server import RedisServer, require_server
from scripted import ScriptedServer, SuiteScript
from serving import served
from starlette.requests import Request

from gatekeeper.rules.tiers import Tier
from gatekeeper.server.console.session import COOKIE, Signer, same_origin
from gatekeeper.server.throttle import KeyThrottle, client_source, request_scheme
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, Suite

KEY = "console-test-key-9f2c"


@dataclass
class Console:
    url: str
    gk: object

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30)

    @contextmanager
    def signed_in(self) -> Iterator[httpx.Client]:
        with self.client() as client:
            response = client.post("/admin/login", data={"key": KEY}, headers={"origin": self.url})
            assert response.status_code == 303, response.text
            yield client

    def csrf(self, client: httpx.Client) -> str:
        page = client.get("/admin/").text
        return page.split('data-csrf="', 1)[1].split('"', 1)[0]


@pytest.fixture
def console(store_path: Path, default_suite: Suite) -> Iterator[Console]:
    """A proxy with a console, over a scripted upstream where `strong` is perfect and `weak`
    never calls tools; both measured before the test starts."""
    script = SuiteScript(DEFAULT_SUITE_DIR)

    def respond(body: dict) -> dict:
        test, step = script.locate(body)
        return (perfect if body["model"] == "strong" else no_tool_calls)(test, step)

    with ScriptedServer(respond) as upstream:
        settings = settings_for(upstream.base_url, store_path, admin_key=KEY, pins={"pinned-model": "medium"})
        with running_proxy(settings) as proxy:
            proxy.gk.measure("strong").result(timeout=30)
            proxy.gk.measure("weak", "low").result(timeout=30)
            yield Console(proxy.url, proxy.gk)


CONSOLE_PAGES = ["/admin/", "/admin/model?name=strong"]
CONSOLE_DATA = ["/admin/progress.json", "/admin/assets/console.js"]
CONSOLE_ACTIONS = ["/admin/actions/measure", "/admin/actions/invalidate", "/admin/logout"]


def test_nothing_is_served_without_a_session(console: Console) -> None:
    with console.client() as client:
        for path in CONSOLE_PAGES:
            response = client.get(path)
            assert response.status_code == 303 and response.headers["location"] == "/admin/login", path
            assert "strong" not in response.text
        for path in CONSOLE_DATA:
            assert client.get(path).status_code == 401, path
        for path in CONSOLE_ACTIONS:
            response = client.post(path, data={"key": "strong@default"}, headers={"origin": console.url})
            assert response.status_code == 401, path
    assert [p.key for p in console.gk.progress()] == ["strong@default", "weak@low"]  # nothing new started
    assert console.gk.store.get("strong@default") is not None


def test_sign_in_form_is_the_only_page_without_a_session(console: Console) -> None:
    with console.client() as client:
        page = client.get("/admin/login")
    assert page.status_code == 200
    assert 'method="post"' in page.text and 'type="password"' in page.text
    assert "strong" not in page.text and "console.js" not in page.text


def test_a_wrong_key_is_refused(console: Console) -> None:
    with console.client() as client:
        response = client.post("/admin/login", data={"key": "not-the-key"}, headers={"origin": console.url})
        assert response.status_code == 401
        assert "Wrong admin key" in response.text
        assert COOKIE not in response.cookies
        assert client.get("/admin/").status_code == 303


def test_repeated_wrong_keys_are_throttled(console: Console) -> None:
    with console.client() as client:
        statuses = [
            client.post("/admin/login", data={"key": f"guess-{i}"}, headers={"origin": console.url}).status_code
            for i in range(12)
        ]
        assert statuses[:10] == [401] * 10 and statuses[10:] == [429, 429]
        # A right key is still let through: a mistyping admin is never locked out ...
        assert client.post("/admin/login", data={"key": KEY}, headers={"origin": console.url}).status_code == 303
        # ... and it cleared the count. Past 100 wrong keys a minute, no key is read at all.
        for i in range(100):
            client.post("/admin/login", data={"key": f"guess-{i}"}, headers={"origin": console.url})
        assert client.post("/admin/login", data={"key": KEY}, headers={"origin": console.url}).status_code == 429


def test_the_session_cookie_is_signed_httponly_strict_and_not_the_key(console: Console) -> None:
    with console.client() as client:
        response = client.post("/admin/login", data={"key": KEY}, headers={"origin": console.url})
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/admin" in cookie
    assert KEY not in cookie
    assert response.headers["location"] == "/admin/"


def test_the_key_never_appears_in_a_page(console: Console) -> None:
    with console.signed_in() as client:
        for path in CONSOLE_PAGES + CONSOLE_DATA:
            response = client.get(path)
            assert response.status_code == 200, path
            assert KEY not in response.text, path


def test_a_forged_or_tampered_session_is_refused(console: Console) -> None:
    with console.signed_in() as client:
        token = client.cookies[COOKIE]
    expiry, nonce, signature = token.split(".")
    forged = [
        f"{int(expiry) + 3600}.{nonce}.{signature}",  # a longer session
        f"{expiry}.{nonce}.{signature[:-2]}AA",  # a guessed signature
        Signer("another-key").issue(),  # signed with another key
        KEY,  # the key itself is no session
    ]
    for value in forged:
        with console.client() as client:
            client.cookies.set(COOKIE, value)
            assert client.get("/admin/progress.json").status_code == 401, value


def test_an_expired_session_is_refused() -> None:
    signer = Signer(KEY, ttl_s=60)
    token = signer.issue(now=1_000_000)
    assert signer.verify(token, now=1_000_030) is not None
    assert signer.verify(token, now=1_000_061) is None


def test_an_action_needs_the_pages_csrf_token(console: Console) -> None:
    with console.signed_in() as client:
        origin = {"origin": console.url}
        assert (
            client.post("/admin/actions/invalidate", data={"key": "strong@default"}, headers=origin).status_code == 403
        )
        wrong = {"key": "strong@default", "csrf": "x" * 43}
        assert client.post("/admin/actions/invalidate", data=wrong, headers=origin).status_code == 403
        assert console.gk.store.get("strong@default") is not None
        good = {"key": "strong@default", "csrf": console.csrf(client)}
        response = client.post("/admin/actions/invalidate", data=good, headers=origin | {"accept": "application/json"})
        assert response.status_code == 200
        assert response.json() == {"invalidated": "strong@default", "existed": True}
    assert console.gk.store.get("strong@default") is None


def test_a_csrf_token_belongs_to_its_session(console: Console) -> None:
    with console.signed_in() as first, console.signed_in() as second:
        token = console.csrf(first)
        response = second.post(
            "/admin/actions/invalidate", data={"key": "strong@default", "csrf": token}, headers={"origin": console.url}
        )
    assert response.status_code == 403
    assert console.gk.store.get("strong@default") is not None


@pytest.mark.parametrize(
    "headers", [{}, {"origin": "http://evil.example"}, {"origin": "null"}, {"referer": "http://evil.example/page"}]
)
def test_an_action_from_another_origin_is_refused(console: Console, headers: dict) -> None:
    with console.signed_in() as client:
        token = console.csrf(client)
        response = client.post(
            "/admin/actions/invalidate", data={"key": "strong@default", "csrf": token}, headers=headers
        )
    assert response.status_code == 403
    assert console.gk.store.get("strong@default") is not None


def test_a_signed_out_session_stays_out(console: Console) -> None:
    with console.signed_in() as client:
        token, csrf = client.cookies[COOKIE], console.csrf(client)
        response = client.post("/admin/logout", data={"csrf": csrf}, headers={"origin": console.url})
        assert response.status_code == 303
    with console.client() as replay:
        replay.cookies.set(COOKIE, token)
        assert replay.get("/admin/progress.json").status_code == 401


def test_the_console_is_absent_without_an_admin_key(upstream, store_path: Path) -> None:
    with running_proxy(settings_for(upstream.base_url, store_path)) as proxy:
        for path in ["/admin/", "/admin/login", "/admin/progress.json"]:
            assert httpx.get(proxy.url + path).status_code == 404, path


def test_pages_forbid_inline_scripts_and_framing(console: Console) -> None:
    with console.signed_in() as client:
        headers = client.get("/admin/").headers
    policy = headers["content-security-policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy and "unsafe-inline" not in policy
    assert headers["x-frame-options"] == "DENY"
    assert headers["cache-control"] == "no-store"


def test_model_names_from_clients_are_escaped(upstream, store_path: Path, default_suite: Suite) -> None:
    hostile = '<script>alert("x")</script>'
    seed_store(store_path, make_profile(hostile, Tier.LARGE, default_suite))
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key=KEY)) as proxy:
        console = Console(proxy.url, proxy.gk)
        with console.signed_in() as client:
            index = client.get("/admin/").text
            model = client.get("/admin/model", params={"name": hostile}).text
    for page in (index, model):
        assert hostile not in page
        assert "&lt;script&gt;alert(" in page


def test_the_list_shows_tier_source_scores_and_validity(console: Console) -> None:
    with console.signed_in() as client:
        page = client.get("/admin/").text
    strong = page.split('data-key="strong@default"', 1)[1].split("</tr>", 1)[0]
    assert "tier-large" in strong and "source-measured" in strong and ">valid<" in strong
    assert 'data-category="toolCalling">1.00<' in strong
    weak = page.split('data-key="weak@low"', 1)[1].split("</tr>", 1)[0]
    tool_calling = console.gk.store.get("weak@low").scores["toolCalling"]
    assert 0 < tool_calling < 0.6  # no tool call made: below medium's threshold
    assert "tier-small" in weak and f'data-category="toolCalling">{tool_calling:.2f}<' in weak
    pinned = page.split('data-key="pinned-model"', 1)[1].split("</tr>", 1)[0]
    assert "tier-medium" in pinned and "source-pinned" in pinned


def test_a_profile_of_another_suite_is_shown_stale(upstream, store_path: Path, default_suite: Suite) -> None:
    seed_store(store_path, make_profile("old-model", Tier.LARGE, default_suite, tests_hash="00000000"))
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key=KEY)) as proxy:
        with Console(proxy.url, proxy.gk).signed_in() as client:
            page = client.get("/admin/").text
    row = page.split('data-key="old-model@default"', 1)[1].split("</tr>", 1)[0]
    assert ">stale<" in row and "source-unmeasured" in row and "tier-small" in row  # the proxy fails closed


def test_several_samples_draw_an_interval(upstream, store_path: Path, default_suite: Suite) -> None:
    profile = make_profile("sampled", Tier.MEDIUM, default_suite)
    doc = profile.to_json() | {"samples": 3, "scoreIntervals": {"toolCalling": [0.6, 0.8], "json": [0.65, 0.75]}}
    store_path.write_text(json.dumps({"profiles": {"sampled@default": doc}, "recommendations": {}}))
    with running_proxy(settings_for(upstream.base_url, store_path, admin_key=KEY)) as proxy:
        if getattr(proxy.gk.store.get("sampled@default"), "samples", None) != 3:
            pytest.skip("Profile has no `samples` field yet (added by the measurement service)")
        with Console(proxy.url, proxy.gk).signed_in() as client:
            page = client.get("/admin/").text
    assert "3 samples: 0.60 to 0.80" in page


def test_progress_counts_every_call_of_a_measurement(console: Console, default_suite: Suite) -> None:
    finished = {p.key: p for p in console.gk.progress()}
    steps = sum(len(t.all_steps) for t in default_suite.tests)
    assert (finished["strong@default"].answered, finished["strong@default"].total) == (steps, steps)
    weak = finished["weak@low"]  # never calls a tool: every chain stops after its first step
    assert weak.answered == weak.total < steps
    assert weak.tier == "small" and weak.error is None and weak.finished is not None


def test_the_model_page_shows_tests_sweep_tools_and_pins(console: Console) -> None:
    with console.signed_in() as client:
        page = client.get("/admin/model", params={"name": "weak"}).text
    assert 'id="sweep-chart"' in page
    assert 'data-test="integer_argument"' in page
    tools = page.split('class="tools"', 1)[1]
    execute = tools.split('data-rule="execute_command"', 1)[1].split("</tr>", 1)[0]
    assert "hidden" in execute and "sees" not in execute
    other = tools.split('data-rule="any other tool"', 1)[1].split("</tr>", 1)[0]
    assert "sees" in other


def test_an_unknown_model_page_is_a_404(console: Console) -> None:
    with console.signed_in() as client:
        assert client.get("/admin/model", params={"name": "nobody"}).status_code == 404


def test_same_origin_rule() -> None:
    assert same_origin("http://h:1", None, "http", "h:1")
    assert same_origin(None, "http://h:1/admin/", "http", "h:1")
    assert not same_origin("http://h:1", None, "https", "h:1")
    assert not same_origin(None, None, "http", "h:1")
    assert not same_origin("http://h:1", None, "http", None)


def test_the_model_page_shows_what_live_traffic_says(store_path: Path, default_suite: Suite) -> None:
    seed_store(store_path, make_profile("live-model", Tier.LARGE, default_suite))

    def invents_a_tool(body: dict) -> dict:
        return {"content": None, "tool_calls": [{"name": "format_disk", "arguments": {}}]}

    read_file = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    with ScriptedServer(invents_a_tool) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path, admin_key=KEY)) as proxy:
            proxy.client.chat.completions.create(
                model="live-model", messages=[{"role": "user", "content": "hi"}], tools=[read_file]
            )
            with Console(proxy.url, proxy.gk).signed_in() as client:
                page = client.get("/admin/model", params={"name": "live-model"}).text
    live = page.split('data-live="default"', 1)[1].split("</tr>", 1)[0]
    cells = [c.split(">", 1)[1].split("<", 1)[0].strip() for c in live.split("<td")[1:]]
    assert cells[1] == "1"  # one call relayed ...
    assert cells[2] == "1"  # ... to a tool that was not offered
    assert cells[5] == "0"  # and none written as text (textCall)


# -- issue 20: nobody is locked out by another's guesses; a sign-out holds everywhere ------------


def from_address(url: str, address: str) -> httpx.Client:
    """A client whose connections come from `address` (any 127.x.y.z is this host's loopback)."""
    return httpx.Client(base_url=url, timeout=30, transport=httpx.HTTPTransport(local_address=address))


def sign_in(client: httpx.Client, url: str, key: str = KEY, **headers: str) -> httpx.Response:
    return client.post("/admin/login", data={"key": key}, headers={"origin": url, **headers})


def test_wrong_keys_from_one_address_never_lock_out_another(console: Console) -> None:
    with from_address(console.url, "127.0.0.2") as guesser:
        statuses = [sign_in(guesser, console.url, f"guess-{i}").status_code for i in range(30)]
        assert statuses[:10] == [401] * 10 and set(statuses[10:]) == {429}
        throttled = sign_in(guesser, console.url, "guess-again")
        assert throttled.status_code == 429 and 1 <= int(throttled.headers["retry-after"]) <= 60
    with console.client() as admin:  # 127.0.0.1: another address
        assert sign_in(admin, console.url).status_code == 303
        assert admin.get("/admin/").status_code == 200


def test_behind_a_proxy_the_trusted_header_names_the_source(upstream: ScriptedServer, store_path: Path) -> None:
    settings = settings_for(upstream.base_url, store_path, admin_key=KEY, trusted_proxy_header="X-Forwarded-For")
    with running_proxy(settings) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as client:
        # The guesser writes what it likes on the left; the proxy in front appends the address it saw.
        for i in range(12):
            sign_in(client, proxy.url, f"guess-{i}", **{"x-forwarded-for": f"10.9.9.{i}, 203.0.113.66"})
        assert sign_in(client, proxy.url, "guess", **{"x-forwarded-for": "203.0.113.66"}).status_code == 429
        assert sign_in(client, proxy.url, **{"x-forwarded-for": "198.51.100.7"}).status_code == 303


def test_a_signed_out_session_stays_out_after_a_restart(upstream: ScriptedServer, tmp_path: Path) -> None:
    config = f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "{tmp_path / "models_profile.json"}"
admin_key: {KEY}
"""
    with served(config, tmp_path) as first:
        console = Console(first.url, None)
        with console.signed_in() as kept:
            kept_token = kept.cookies[COOKIE]
        with console.signed_in() as client:
            token, csrf = client.cookies[COOKIE], console.csrf(client)
            assert client.post("/admin/logout", data={"csrf": csrf}, headers={"origin": first.url}).status_code == 303
    with served(config, tmp_path) as restarted, httpx.Client(base_url=restarted.url, timeout=30) as replay:
        replay.cookies.set(COOKIE, token)
        assert replay.get("/admin/progress.json").status_code == 401
        replay.cookies.set(COOKIE, kept_token)  # only the session that signed out is out
        assert replay.get("/admin/progress.json").status_code == 200


def test_a_sign_out_on_one_replica_holds_on_the_others(upstream: ScriptedServer, tmp_path: Path) -> None:
    require_server()
    with RedisServer(tmp_path) as redis_server:
        config = f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "{redis_server.url}"
admin_key: {KEY}
"""
        with served(config, tmp_path) as a, served(config, tmp_path) as b:
            with Console(a.url, None).signed_in() as on_a:
                token, csrf = on_a.cookies[COOKIE], Console(a.url, None).csrf(on_a)
            with httpx.Client(base_url=b.url, timeout=30) as on_b:
                on_b.cookies.set(COOKIE, token)  # replicas share the key: B accepts A's session
                assert on_b.get("/admin/progress.json").status_code == 200
                assert on_b.post("/admin/logout", data={"csrf": csrf}, headers={"origin": b.url}).status_code == 303
            for replica in (a, b):
                with httpx.Client(base_url=replica.url, timeout=30) as replay:
                    replay.cookies.set(COOKIE, token)
                    assert replay.get("/admin/progress.json").status_code == 401, replica.url


def test_a_session_the_store_cannot_check_is_refused(upstream: ScriptedServer, tmp_path: Path) -> None:
    require_server()
    with RedisServer(tmp_path) as redis_server:
        settings = settings_for(upstream.base_url, redis_server.url, admin_key=KEY)
        with running_proxy(settings) as proxy:
            console = Console(proxy.url, proxy.gk)
            with console.signed_in() as client:
                assert client.get("/admin/progress.json").status_code == 200
                redis_server.stop()  # whether it was signed out elsewhere is unknown now: fail closed
                assert client.get("/admin/progress.json").status_code == 401
                redis_server.start()
                wait_until(lambda: client.get("/admin/progress.json").status_code == 200, "Redis to answer again")


def test_the_table_of_sources_is_bounded() -> None:
    throttle = KeyThrottle(attempts=3, max_sources=100)
    for i in range(5000):
        throttle.failed(f"10.0.{i // 256}.{i % 256}")
    assert len(throttle) <= 100


def _request(peer: str, headers: dict[str, str], **settings: object) -> Request:
    app = SimpleNamespace(state=SimpleNamespace(gk=SimpleNamespace(settings=SimpleNamespace(**settings))))
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = {"type": "http", "scheme": "http", "server": ("gk", 80), "path": "/", "query_string": b""}
    return Request(scope | {"headers": raw, "client": (peer, 4321), "app": app})


def test_the_source_is_the_peer_unless_a_trusted_header_is_configured() -> None:
    forged = {"x-forwarded-for": "1.2.3.4"}
    assert client_source(_request("10.0.0.1", forged)) == "10.0.0.1"
    assert client_source(_request("10.0.0.1", forged, trusted_proxy_header=None)) == "10.0.0.1"
    trusted = {"trusted_proxy_header": "X-Forwarded-For", "trusted_proxy_hops": 2, "trusted_proxies": ["10.0.0.1"]}
    # Two proxies append: the client is the second entry from the right, whatever it forged before.
    assert (
        client_source(_request("10.0.0.1", {"x-forwarded-for": "6.6.6.6, 1.2.3.4, 10.0.0.9"}, **trusted)) == "1.2.3.4"
    )
    # Fewer entries than hops: it did not come through both proxies; counted by its peer.
    assert client_source(_request("10.0.0.1", {"x-forwarded-for": "1.2.3.4"}, **trusted)) == "10.0.0.1"
    one_hop = {"trusted_proxy_header": "X-Real-IP", "trusted_proxy_hops": 1, "trusted_proxies": ["10.0.0.0/8"]}
    assert client_source(_request("10.0.0.1", {"x-real-ip": "1.2.3.4:5555"}, **one_hop)) == "1.2.3.4"
    # A client that reaches gatekeeper directly cannot name itself a new address per request.
    assert client_source(_request("192.0.2.8", {"x-real-ip": "1.2.3.4"}, **one_hop)) == "192.0.2.8"


def test_ipv6_sources_count_per_64_block() -> None:
    assert client_source(_request("2001:db8:1:2::1", {})) == client_source(_request("2001:db8:1:2:ffff::9", {}))
    assert client_source(_request("2001:db8:1:2::1", {})) != client_source(_request("2001:db8:1:3::1", {}))
    assert client_source(_request("::ffff:10.1.2.3", {})) == "10.1.2.3"


def test_only_a_trusted_proxy_says_the_client_uses_https() -> None:
    https = {"x-forwarded-proto": "https"}
    assert request_scheme(_request("127.0.0.1", https, trusted_proxies=["127.0.0.0/8"])) == "https"
    assert request_scheme(_request("192.0.2.8", https, trusted_proxies=["127.0.0.0/8"])) == "http"
    assert request_scheme(_request("127.0.0.1", {}, trusted_proxies=["127.0.0.0/8"])) == "http"
