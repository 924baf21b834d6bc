"""What the fourth red-team round (issue 20, on the main of 2026-12-01 after the gate was rebuilt
to be closed by construction) got through, each through the real proxy on a real port, sent by
the official client; what the upstream received, and what the client read, is the evidence.

- Messages `mcp_servers` with two servers of one name: the second replaced the first in the
  gate's table, so `[{github, allowed_tools: [list_repos]}, {github}]` reached the upstream as
  the whole `github` server (its `delete_repo` run by the provider, whatever the answer side
  then cut). A second server of a name is refused, as a second toolset already was.
- A server's tools can be said in two places, `mcp_servers[].tool_configuration.allowed_tools`
  and its `mcp_toolset`, and the API version decides which one counts. A whole toolset next to
  a server that lists its tools, or next to a server the gate narrowed to a listing, was sent
  whole: under the toolset API every tool of the server was offered. Both now say the same
  admitted tools. An `mcp_toolset` for a server `mcp_servers` does not define went whole; refused.
- An upstream that quotes the credential it got in an error (`Incorrect API key provided:
  Bearer sk-...`, unmasked) showed a client without a key the operator's `upstream.api_key`,
  which the proxy had added for it. Error bodies relayed from the upstream never carry the
  operator's key, Basic credential or URL password now (nor a litellm route's key).
- Lazy measurements that failed (a model name the upstream does not know) stored nothing, so
  they never counted against `lazy.max_models` / `max_pairs`: each request naming a new model
  cost a measurement's calls, without end. A pair a request started measuring counts, landed or not.
- A chat stream translated for a Responses or Messages client kept a call's first name when a
  later delta named another tool (native chat ends such a stream in error): the client ran the
  offered tool with what the model wrote for another. It ends in the protocol's error event now.
- A pin such as `claude-x@20240620: small` (a Vertex model id) was read as model `claude-x` at
  effort `20240620`, which no request can carry: it never applied, and the model it meant was
  measured instead. A pin's effort part must be an effort or `*`.
- Memos keyed by names a client (or an upstream) chooses were bounded in entries, not in size:
  a distinct multi-megabyte tool name per request stayed in memory (100,000 of them). Names over
  256 characters (MCP URLs over 2 KB, schemas over 64 KB) are judged each time, never kept.
- A Responses MCP filter `{tool_names: [...], read_only: true}` was forwarded with `read_only`
  (also after the gate narrowed the names): the API does not say whether the two meet or add up,
  and read as "add up" it offered every read-only tool of the server, hidden ones too. While a
  rule hides some of a server's tools, `read_only` is a 400 asking for the tools by name.
- Booleans the gate reads were read as `is True` / `is False` and forwarded in any spelling: an
  `mcp_toolset` config `{"enabled": "true"}` (or 1) did not count as enabled but reached a server
  that may take it for true; chat's `chat_template_kwargs.enable_thinking: 0` did not count as
  off but a template may take it for off. Both must be true or false now.
- A stateless Responses turn could approve an MCP call to a hidden tool: the input carried the
  server's `mcp_approval_request` for `github.delete_repo` and the client's `approve: true`, and
  the server runs approved calls itself. Refused now (an approval of a request held in server
  state, through `previous_response_id`, stays a known limit).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest
from conftest import Proxy, claude, running_proxy, settings_for, small_model_proxy, suite_requests, tool, wait_until
from scripted import RawAnswer, RawUpstream, ScriptedServer
from upstreams import NativeServer

from gatekeeper.config import ModelRoute, load_settings
from gatekeeper.drift.window import _validator, _validator_for
from gatekeeper.errors import ConfigError
from gatekeeper.rules.mcp_identity import _normalised, normalise_url
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import MEMO_NAME_LIMIT
from gatekeeper.server.litellm_route import _upstream_error

HI = [{"role": "user", "content": "hi"}]
RULES = {"execute_command": "large", "write_*": "medium", "github.delete_*": "large"}
GITHUB_URL = "https://mcp.example/github"


@pytest.fixture
def native() -> Iterator[NativeServer]:
    with NativeServer() as server:
        yield server


def proxy_for(
    upstream: NativeServer, store_path, default_suite, protocols=("chat", "responses", "messages"), rules=RULES
):
    return small_model_proxy(
        upstream.base_url,
        store_path,
        default_suite,
        upstream={"base_url": upstream.base_url, "protocols": list(protocols)},
        tools={"default_tier": "small", "required_tier": rules},
        blocked_calls="strip",
    )


@pytest.fixture
def proxy(native, store_path, default_suite) -> Iterator[Proxy]:
    with proxy_for(native, store_path, default_suite) as running:
        yield running


# -- Messages: an MCP server's tools said twice ------------------------------------------------


def github(**config) -> dict:
    server = {"type": "url", "name": "github", "url": GITHUB_URL}
    return server | ({"tool_configuration": config} if config else {})


def reachable(request: dict, server: str = "github") -> set[str] | None:
    """The tools of `server` that a Messages request lets the model call under either API
    version's reading: each form that names the server (its `tool_configuration`, its toolset)
    must narrow it, else it is whole (None)."""
    forms: list[set[str] | None] = []
    for entry in request.get("mcp_servers") or []:
        if entry["name"] == server:
            allowed = (entry.get("tool_configuration") or {}).get("allowed_tools")
            forms.append(None if allowed is None else set(allowed))
    for toolset in request.get("tools") or []:
        if toolset.get("type") == "mcp_toolset" and toolset["mcp_server_name"] == server:
            if toolset.get("tools") is not None:
                forms.append({t["name"] for t in toolset["tools"]})
            elif (toolset.get("default_config") or {}).get("enabled") is False:
                forms.append({n for n, c in (toolset.get("configs") or {}).items() if c.get("enabled") is True})
            else:
                forms.append(None)
    if any(form is None for form in forms):
        return None
    return set().union(*forms)  # type: ignore[arg-type]


def test_a_second_mcp_server_of_the_same_name_is_refused(proxy, native):
    servers = [github(allowed_tools=["list_repos"]), github()]
    with pytest.raises(anthropic.BadRequestError, match=r"mcp_servers\[1\]: a second MCP server named 'github'"):
        claude(proxy).messages.create(
            model="small-model", max_tokens=10, messages=HI, extra_body={"mcp_servers": servers}
        )
    assert native.messages_requests == []


def test_a_whole_toolset_next_to_a_server_that_lists_its_tools_offers_only_those(proxy, native):
    claude(proxy).messages.create(
        model="small-model",
        max_tokens=10,
        messages=HI,
        tools=[{"type": "mcp_toolset", "mcp_server_name": "github"}],
        extra_body={"mcp_servers": [github(allowed_tools=["list_repos"])]},
    )
    assert reachable(native.messages_requests[-1]) == {"list_repos"}


def test_a_server_narrowed_to_its_listing_narrows_its_whole_toolset_too(proxy, native):
    # No per-tool list anywhere, a rule hides github.delete_*: narrowed to the listing's admitted tools.
    listing = {
        "type": "mcp_tool_listing",
        "mcp_server_name": "github",
        "tools": [{"name": "list_repos"}, {"name": "delete_repo"}],
    }
    claude(proxy).messages.create(
        model="small-model",
        max_tokens=10,
        messages=[HI[0], {"role": "assistant", "content": [listing]}, HI[0]],
        tools=[{"type": "mcp_toolset", "mcp_server_name": "github"}],
        extra_body={"mcp_servers": [github()]},
    )
    assert reachable(native.messages_requests[-1]) == {"list_repos"}


def test_a_whole_toolset_of_a_server_that_lists_nothing_still_asks_for_a_list(proxy, native):
    with pytest.raises(anthropic.BadRequestError, match="allowed_tools"):
        claude(proxy).messages.create(
            model="small-model",
            max_tokens=10,
            messages=HI,
            tools=[{"type": "mcp_toolset", "mcp_server_name": "github"}],
            extra_body={"mcp_servers": [github()]},
        )
    assert native.messages_requests == []


def test_a_toolset_for_a_server_the_request_does_not_define_is_refused(proxy, native):
    # Nothing the gate saw said which server it was, nor narrowed it: it went whole (an upstream
    # that knows servers by name, as a gateway with its own MCP config, would offer them all).
    with pytest.raises(anthropic.BadRequestError, match=r"tools\[0\]: an mcp_toolset for MCP server 'github', which"):
        claude(proxy).messages.create(
            model="small-model",
            max_tokens=10,
            messages=HI,
            tools=[{"type": "mcp_toolset", "mcp_server_name": "github"}],
        )
    assert native.messages_requests == []


def test_mcp_servers_through_a_chat_only_upstream_are_refused(native, store_path, default_suite):
    with proxy_for(native, store_path, default_suite, protocols=("chat",)) as proxy:
        with pytest.raises(anthropic.BadRequestError):
            claude(proxy).messages.create(
                model="small-model",
                max_tokens=10,
                messages=HI,
                tools=[{"type": "mcp_toolset", "mcp_server_name": "github"}],
                extra_body={"mcp_servers": [github(allowed_tools=["list_repos"])]},
            )
    assert native.requests == [] and native.messages_requests == []


# -- the operator's upstream key, echoed by the upstream -----------------------------------------

OPERATOR_KEY = "sk-operator-Secret-4242"


def echoing(upstream: RawUpstream) -> Callable[[dict], RawAnswer]:
    """An upstream that quotes the credential it got in its 401 (as some gateways do, unmasked)."""

    def answer(body: dict) -> RawAnswer:
        sent = upstream.headers[-1].get("authorization", "")
        error = {"message": f"Incorrect API key provided: {sent}", "type": "invalid_request_error"}
        return RawAnswer(json.dumps({"type": "error", "error": error}).encode(), status=401)

    return answer


@pytest.mark.parametrize("protocols", [("chat", "responses", "messages"), ("chat",)], ids=["native", "translated"])
def test_an_upstream_echoing_the_operator_s_key_never_shows_it_to_a_client(store_path, default_suite, protocols):
    # The client sends no key: the proxy adds the operator's (upstream.api_key), which the
    # upstream quoted back to the client.
    with RawUpstream() as upstream:
        upstream.answer = echoing(upstream)
        with small_model_proxy(
            upstream.base_url,
            store_path,
            default_suite,
            upstream={"base_url": upstream.base_url, "api_key": OPERATOR_KEY, "protocols": list(protocols)},
        ) as proxy:
            keyless = {"Authorization": openai.omit}  # no Authorization at all (the SDK's way to drop it)
            with pytest.raises(openai.AuthenticationError) as chat:
                proxy.client.chat.completions.create(model="small-model", messages=HI, extra_headers=keyless)
            with pytest.raises(openai.AuthenticationError) as responses:
                proxy.client.responses.create(model="small-model", input="hi", extra_headers=keyless)
            with pytest.raises(anthropic.AuthenticationError) as messages:
                claude(proxy).messages.create(
                    model="small-model", max_tokens=10, messages=HI, extra_headers={"Authorization": anthropic.omit}
                )
    assert upstream.headers[0]["authorization"] == f"Bearer {OPERATOR_KEY}"  # it was sent, and echoed
    for refused in (chat.value, responses.value, messages.value):
        assert "Incorrect API key provided: Bearer ***" in str(refused.body)
        assert OPERATOR_KEY not in str(refused.body) and OPERATOR_KEY not in refused.response.text


def test_a_litellm_route_s_error_never_quotes_its_key_or_a_url_credential():
    route = ModelRoute(name="r", litellm_model="gemini/x", api_key=OPERATOR_KEY, api_base="https://u:pw@h/v1")
    failure = RuntimeError(
        f"POST https://h/v1/models/x?key={OPERATOR_KEY} failed; sent {OPERATOR_KEY} to https://u:pw@h/v1"
    )
    message = _upstream_error(route, failure).message
    assert OPERATOR_KEY not in message and "pw" not in message
    # A provider that failed is named by the route alone (its address is the log's: issue 43) ...
    assert message == "model 'r': the provider failed (RuntimeError)"

    # ... and its verdict on the request (a 4xx) is relayed with every credential and URL scrubbed.
    class Refused(RuntimeError):
        status_code = 400

    message = _upstream_error(route, Refused(str(failure))).message
    assert OPERATOR_KEY not in message and "pw" not in message
    assert message == "model 'r': Refused: POST ***/models/x?key=*** failed; sent *** to ***"


# -- measurements a client can start ---------------------------------------------------------------


def test_measurements_that_fail_still_count_against_the_lazy_caps(store_path, default_suite):
    # The upstream knows no `victim*` model, so each one's measurement fails after its first
    # calls and stores nothing; nothing stored, nothing counted: every request naming a new model
    # cost a measurement (about 15 upstream calls here), without end.
    def answer(body: dict) -> dict:
        if body["model"].startswith("victim"):
            return {"status": 404, "error": f"model {body['model']} not found"}
        return {"content": "ok", "tool_calls": []}

    with ScriptedServer(answer) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path, lazy={"max_models": 2})) as proxy:
            for i in range(6):
                with pytest.raises(openai.NotFoundError):
                    proxy.client.chat.completions.create(model=f"victim{i}", messages=HI, tools=[tool("read_file")])
                # Each measurement over before the next name: a failed one no longer runs.
                wait_until(lambda: all(p.finished for p in proxy.gk.progress()), "the measurements to end")
    assert {body["model"] for body in suite_requests(upstream, default_suite)} == {"victim0", "victim1"}


# -- a translated stream that renames a kept call ------------------------------------------------


def test_a_chat_stream_renaming_a_kept_call_ends_the_translated_stream_in_error(store_path, default_suite):
    # Native chat ends such a stream in error; the translation kept the first name, so the
    # client ran read_file with what the model wrote for another tool (openai-python would have
    # called `read_fileexecute_command`, openai-node `execute_command`).
    def chunk(call: dict, finish: str | None = None) -> dict:
        return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m", "choices": [
            {"index": 0, "delta": {"tool_calls": [call]} if call else {}, "finish_reason": finish}]}  # fmt: skip

    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": ""}}
    renamed = {"index": 0, "function": {"name": "execute_command", "arguments": "{}"}}
    events = [chunk(first), chunk(renamed), chunk({}, "tool_calls")]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    with RawUpstream(RawAnswer(body, content_type="text/event-stream")) as upstream:
        with small_model_proxy(
            upstream.base_url,
            store_path,
            default_suite,
            upstream={"base_url": upstream.base_url, "protocols": ["chat"]},
        ) as proxy:
            function = {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
            with pytest.raises(openai.APIError, match="renames tool call 'read_file' to 'execute_command'"):
                with proxy.client.responses.stream(model="small-model", input="hi", tools=[function]) as stream:
                    stream.get_final_response()
            claude_tool = {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
            with pytest.raises(anthropic.APIStatusError, match="renames tool call 'read_file' to 'execute_command'"):
                with claude(proxy).messages.stream(
                    model="small-model", max_tokens=10, messages=HI, tools=[claude_tool]
                ) as stream:
                    stream.get_final_message()


# -- a pin that could never apply ------------------------------------------------------------------


def test_a_pin_whose_effort_part_is_no_effort_is_refused(tmp_path):
    # `claude-x@20240620: small` (a Vertex model id) read as model `claude-x` at effort
    # `20240620`, which no request can carry: the pin never applied, and requests for the model it
    # meant were measured instead (perhaps large).
    config = tmp_path / "gatekeeper.yaml"
    config.write_text("upstream: {base_url: 'http://127.0.0.1:9/v1'}\npins: {'claude-x@20240620': small}\n")
    with pytest.raises(
        ConfigError, match=r"'claude-x@20240620' pins model 'claude-x' at effort '20240620'.*'claude-x@20240620@\*'"
    ):
        load_settings(config)
    config.write_text(
        "upstream: {base_url: 'http://127.0.0.1:9/v1'}\npins: {'claude-x@20240620@*': small, 'm@low': large}\n"
    )
    settings = load_settings(config)
    assert settings.pin_for("claude-x@20240620", "default") is Tier.SMALL and settings.pin_for("m", "low") is Tier.LARGE


# -- memory a client's names can take ------------------------------------------------------------------


def test_long_tool_names_are_judged_each_time_and_never_kept(native, store_path, default_suite):
    # The tool-rule memo held 100,000 names of any length: requests with one distinct 2 MB tool
    # name each kept 2 MB each (60 of them: +245 MB of resident memory), up to 8 MB per request
    # (the body limit) for every one of the 100,000 entries.
    long = "x" * (MEMO_NAME_LIMIT + 1)
    with proxy_for(native, store_path, default_suite) as proxy:
        for i in range(3):
            name = {"type": "function", "function": {"name": f"{long}{i}"}}
            proxy.client.chat.completions.create(model="small-model", messages=HI, tools=[name])
        proxy.client.chat.completions.create(model="small-model", messages=HI, tools=[tool("read_file")])
        kept = list(proxy.gk.policy._memo.keys())
    assert kept and all(len(str(name)) <= MEMO_NAME_LIMIT for name in kept)
    assert native.requests[0]["tools"][0]["function"]["name"] == f"{long}0"  # judged, and forwarded


def test_long_server_urls_and_schemas_are_never_cached():
    # The same for MCP server URLs (4,096 of any length) and drift's schema validators (512).
    before = _normalised.cache_info().currsize
    assert normalise_url("HTTPS://Example.com:443/" + "p" * 4096 + "/") == "https://example.com/" + "p" * 4096
    assert _normalised.cache_info().currsize == before
    schema = {"type": "object", "description": "d" * (70 * 1024)}
    before = _validator.cache_info().currsize
    assert _validator_for(schema) is not None
    assert _validator.cache_info().currsize == before


# -- Responses: an MCP filter that may add tools ---------------------------------------------------

DOCS_LISTING = {
    "type": "mcp_list_tools",
    "id": "mcpl_1",
    "server_label": "github",
    "tools": [{"name": "list_repos", "input_schema": {}}, {"name": "delete_repo", "input_schema": {}}],
}


@pytest.mark.parametrize(
    ("allowed", "listed"),
    [({"tool_names": ["list_repos"], "read_only": True}, False), ({"read_only": True}, True)],
    ids=["tool_names and read_only", "read_only narrowed to a listing"],
)
def test_read_only_beside_a_tool_list_is_refused_while_a_rule_hides_tools(proxy, native, allowed, listed):
    # Whether `read_only` meets the tool list or adds to it the API does not say; read as "adds",
    # `{tool_names: [list_repos], read_only: true}` offered every read-only tool of the server,
    # hidden ones too (a rule may hide a read-only tool: `github.read_secret: large`).
    server = {"type": "mcp", "server_label": "github", "server_url": GITHUB_URL, "allowed_tools": allowed}
    with pytest.raises(openai.BadRequestError, match=r"allowed_tools\.read_only: MCP server 'github' has tools hidden"):
        proxy.client.responses.create(
            model="small-model",
            input=[DOCS_LISTING] if listed else "hi",
            tools=[server],  # type: ignore[list-item]
        )
    assert native.responses_requests == []


def test_read_only_stays_when_no_rule_hides_a_tool(native, store_path, default_suite):
    server = {"type": "mcp", "server_label": "docs", "server_url": "https://mcp.example/docs"}
    server["allowed_tools"] = {"tool_names": ["search"], "read_only": True}
    with proxy_for(native, store_path, default_suite, rules={}) as proxy:
        proxy.client.responses.create(model="small-model", input="hi", tools=[server])  # type: ignore[list-item]
    assert native.responses_requests[-1]["tools"][0]["allowed_tools"] == {"tool_names": ["search"], "read_only": True}


# -- booleans the gate reads, in the spellings a lax server takes ----------------------------------


@pytest.mark.parametrize("spelling", ["true", 1], ids=["string", "number"])
def test_a_toolset_config_enabled_that_is_not_a_boolean_is_refused(proxy, native, spelling):
    # The gate counts a tool enabled only when `enabled` is true; `"true"` or 1 was forwarded as
    # it was, and a server that reads them as true (pydantic's lax mode does) enabled delete_repo.
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "github",
        "default_config": {"enabled": False},
        "configs": {"list_repos": {"enabled": True}, "delete_repo": {"enabled": spelling}},
    }
    with pytest.raises(
        anthropic.BadRequestError, match=r"tools\[0\]\.configs\.delete_repo\.enabled must be true or false"
    ):
        claude(proxy).messages.create(
            model="small-model", max_tokens=10, messages=HI, tools=[toolset], extra_body={"mcp_servers": [github()]}
        )
    assert native.messages_requests == []


@pytest.mark.parametrize("spelling", [0, "false", ""], ids=["zero", "string", "empty"])
def test_a_template_thinking_switch_that_is_not_a_boolean_is_refused(proxy, native, spelling):
    # Read as "not false", so the request kept reasoning_effort's tier; a template that takes 0
    # or "" for off (`{% if not enable_thinking %}`) ran the model without reasoning.
    with pytest.raises(openai.BadRequestError, match=r"chat_template_kwargs\.enable_thinking' must be true or false"):
        proxy.client.chat.completions.create(
            model="small-model",
            messages=HI,
            reasoning_effort="high",
            extra_body={"chat_template_kwargs": {"enable_thinking": spelling}},
        )
    assert native.requests == []


# -- Responses: approving a hidden MCP call ------------------------------------------------------


def approval(name: str) -> list[dict]:
    """A stateless approval turn: the server's request for `name` (from an earlier answer) and
    the client's yes."""
    request = {
        "type": "mcp_approval_request",
        "id": "mcpr_1",
        "server_label": "github",
        "name": name,
        "arguments": "{}",
    }
    return [request, {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}]


def test_an_approval_of_a_hidden_mcp_call_is_refused(proxy, native):
    # The server runs an approved call itself: an input that approves github.delete_repo (hidden
    # at small) asked the server to run it, whatever tools the request offered.
    server = {"type": "mcp", "server_label": "github", "server_url": GITHUB_URL, "allowed_tools": ["list_repos"]}
    with pytest.raises(
        openai.BadRequestError, match=r"input\[1\] approves a call to 'github\.delete_repo', which needs tier 'large'"
    ):
        proxy.client.responses.create(model="small-model", input=approval("delete_repo"), tools=[server])  # type: ignore[arg-type,list-item]
    assert native.responses_requests == []
    proxy.client.responses.create(model="small-model", input=approval("list_repos"), tools=[server])  # type: ignore[arg-type,list-item]
    assert native.responses_requests[-1]["input"][1]["approve"] is True
