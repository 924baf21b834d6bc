"""MCP rules a client cannot escape by renaming the server, through the real proxy: a real upstream
(tests/upstreams.py) answers with `mcp_call` / `mcp_tool_use` items exactly that way, the official
`openai` and `anthropic` clients read the answer; plain and streamed. The rule logic itself:
tests/protocols/test_mcp_identity.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from conftest import Proxy, claude, small_model_proxy
from upstreams import NativeServer

HI = [{"role": "user", "content": "hi"}]
GITHUB_URL = "https://api.githubcopilot.com/mcp/"
EVIL_URL = "https://mcp.evil.example/github"
RULES = {"github.delete_*": "large"}
BOUND = {"github": {"urls": [GITHUB_URL]}}


@pytest.fixture
def native() -> Iterator[NativeServer]:
    with NativeServer() as server:
        yield server


def proxy_for(native: NativeServer, store_path, default_suite, protocols=("chat", "responses", "messages"), **tools):
    rules = {"default_tier": "small", "required_tier": tools.pop("required_tier", RULES), **tools}
    return small_model_proxy(
        native.base_url,
        store_path,
        default_suite,
        upstream={"base_url": native.base_url, "protocols": list(protocols)},
        tools=rules,
    )


@pytest.fixture
def proxy(native, store_path, default_suite) -> Iterator[Proxy]:
    with proxy_for(native, store_path, default_suite) as running:
        yield running


def mcp_tool(label: str, url: str | None = GITHUB_URL, **extra: Any) -> dict[str, Any]:
    return {"type": "mcp", "server_label": label, **({"server_url": url} if url else {}), **extra}


def mcp_calls(label: str) -> list[dict[str, Any]]:
    return [
        {"type": "mcp_call", "id": f"mcp_{n}", "server_label": label, "name": n, "arguments": "{}", "output": "ok"}
        for n in ("delete_repo", "list_repos")
    ]


def responses_answer(proxy: Proxy, tools: list[dict[str, Any]], stream: bool) -> Any:
    if stream:
        with proxy.client.responses.stream(model="small-model", input="hi", tools=tools) as events:
            return events.get_final_response()
    return proxy.client.responses.create(model="small-model", input="hi", tools=tools)


# -- Responses: request side ------------------------------------------------------------------


@pytest.mark.parametrize(
    "tool",
    [
        mcp_tool("gh"),
        mcp_tool("gh", allowed_tools={"read_only": True}),
        mcp_tool("mail", url=None, connector_id="connector_googledrive"),
    ],
    ids=["server_url", "read_only", "connector_id"],
)
def test_a_renamed_responses_server_without_a_tool_list_is_refused_before_the_upstream(
    native, store_path, default_suite, tool
):
    rules = {"github.delete_*": "large", "googledrive.delete_*": "large"}
    with proxy_for(native, store_path, default_suite, required_tier=rules) as proxy:
        with pytest.raises(openai.BadRequestError, match=r"is offered without a list of its tools.*delete_\*"):
            proxy.client.responses.create(model="small-model", input="hi", tools=[tool])
    assert native.responses_requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_renamed_responses_server_is_narrowed_and_its_hidden_call_removed(proxy, native, stream):
    native.responder = lambda body: {"content": None, "items": mcp_calls("gh")}
    final = responses_answer(proxy, [mcp_tool("gh", allowed_tools=["delete_repo", "list_repos"])], stream)
    assert native.responses_requests[-1]["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [(i.type, i.server_label, i.name) for i in final.output] == [("mcp_call", "gh", "list_repos")]


def test_a_renamed_responses_server_is_narrowed_by_the_listing_it_carries(proxy, native):
    listing = {
        "type": "mcp_list_tools",
        "id": "mcpl_1",
        "server_label": "gh",
        "tools": [{"name": n, "input_schema": {"type": "object"}} for n in ("delete_repo", "list_repos")],
    }
    native.responder = lambda body: {"content": None, "items": mcp_calls("gh")}
    final = proxy.client.responses.create(model="small-model", input=[listing], tools=[mcp_tool("gh")])
    sent = native.responses_requests[-1]
    assert sent["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [t["name"] for t in sent["input"][0]["tools"]] == ["list_repos"]
    assert [i.name for i in final.output] == ["list_repos"]


# -- Responses: identity by URL ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_a_server_bound_by_its_url_is_exact_under_another_label(native, store_path, default_suite, stream):
    # gitlab's rule is not github's: bound, `gh` is github and offered whole; its calls all stay.
    rules = {"gitlab.delete_*": "large"}
    native.responder = lambda body: {"content": None, "items": mcp_calls("gh")}
    with proxy_for(native, store_path, default_suite, required_tier=rules, mcp_servers=BOUND) as proxy:
        final = responses_answer(proxy, [mcp_tool("gh")], stream)
    assert native.responses_requests[-1]["tools"] == [mcp_tool("gh")]
    assert [i.name for i in final.output] == ["delete_repo", "list_repos"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_bound_server_keeps_its_rules_under_any_label(native, store_path, default_suite, stream):
    native.responder = lambda body: {"content": None, "items": mcp_calls("anything")}
    tool = mcp_tool(
        "anything", url="HTTPS://API.githubcopilot.com:443/mcp", allowed_tools=["delete_repo", "list_repos"]
    )
    with proxy_for(native, store_path, default_suite, mcp_servers=BOUND) as proxy:
        final = responses_answer(proxy, [tool], stream)
    assert native.responses_requests[-1]["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [i.name for i in final.output] == ["list_repos"]


def test_a_server_impersonating_a_bound_label_is_refused_naming_the_label_and_url(native, store_path, default_suite):
    with proxy_for(native, store_path, default_suite, mcp_servers=BOUND) as proxy:
        with pytest.raises(openai.BadRequestError) as caught:
            proxy.client.responses.create(
                model="small-model", input="hi", tools=[mcp_tool("github", url=EVIL_URL, allowed_tools=["list_repos"])]
            )
    assert "'github'" in caught.value.message and EVIL_URL in caught.value.message
    assert native.responses_requests == []


def test_a_binding_is_hot_reloaded(native, store_path, default_suite, tmp_path):
    impostor = [mcp_tool("github", url=EVIL_URL, allowed_tools=["list_repos"])]
    with proxy_for(native, store_path, default_suite) as proxy:
        proxy.client.responses.create(model="small-model", input="hi", tools=impostor)
        assert len(native.responses_requests) == 1  # unbound, a label is taken at its word
        config = proxy.gk.settings.model_dump(mode="json", exclude_defaults=True)
        config["tools"]["mcp_servers"] = BOUND
        path = tmp_path / "gatekeeper.yaml"
        path.write_text(json.dumps(config))  # JSON is YAML
        proxy.gk.reload(path)
        with pytest.raises(openai.BadRequestError, match="bound to other servers"):
            proxy.client.responses.create(model="small-model", input="hi", tools=impostor)
    assert len(native.responses_requests) == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_category_minimum_of_a_server_reaches_it_renamed(native, store_path, default_suite, stream):
    # tools.requires: small-model's profile stores no bounds, so a minimum is unmet.
    native.responder = lambda body: {"content": None, "items": mcp_calls("gh")}
    requires = {"github.delete_*": {"toolCalling": 0.9}}
    with proxy_for(native, store_path, default_suite, required_tier={}, requires=requires) as proxy:
        with pytest.raises(openai.BadRequestError, match=r"offered without a list.*github\.delete_\*"):
            proxy.client.responses.create(model="small-model", input="hi", tools=[mcp_tool("gh")])
        final = responses_answer(proxy, [mcp_tool("gh", allowed_tools=["delete_repo", "list_repos"])], stream)
    assert native.responses_requests[-1]["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [i.name for i in final.output] == ["list_repos"]


# -- Messages ---------------------------------------------------------------------------------


def url_server(name: str, url: str = GITHUB_URL, **extra: Any) -> dict[str, Any]:
    return {"type": "url", "name": name, "url": url, **extra}


def messages_answer(proxy: Proxy, stream: bool, **request: Any) -> Any:
    client = claude(proxy)
    request = {"model": "small-model", "max_tokens": 10, "messages": HI, **request}
    if stream:
        with client.beta.messages.stream(**request) as events:
            return events.get_final_message()
    return client.beta.messages.create(**request)


def mcp_tool_uses(server: str) -> list[dict[str, Any]]:
    return [
        {"type": "mcp_tool_use", "id": f"mcptoolu_{n}", "server_name": server, "name": n, "input": {}}
        for n in ("delete_repo", "list_repos")
    ]


@pytest.mark.parametrize("toolset", [False, True], ids=["mcp_servers", "mcp_toolset"])
def test_a_renamed_messages_server_without_a_tool_list_is_refused_before_the_upstream(proxy, native, toolset):
    extra = {"tools": [{"type": "mcp_toolset", "mcp_server_name": "GitHub"}]} if toolset else {}
    with pytest.raises(anthropic.BadRequestError, match=r"MCP server 'GitHub' is offered without a list.*github"):
        messages_answer(proxy, False, mcp_servers=[url_server("GitHub")], **extra)
    assert native.messages_requests == []


@pytest.mark.parametrize("stream", [False, True])
def test_a_renamed_messages_server_is_narrowed_and_its_hidden_call_removed(proxy, native, stream):
    native.responder = lambda body: {"content": None, "items": mcp_tool_uses("GitHub")}
    server = url_server("GitHub", tool_configuration={"allowed_tools": ["delete_repo", "list_repos"]})
    message = messages_answer(proxy, stream, mcp_servers=[server])
    assert native.messages_requests[-1]["mcp_servers"][0]["tool_configuration"]["allowed_tools"] == ["list_repos"]
    assert [(b.type, b.server_name, b.name) for b in message.content] == [("mcp_tool_use", "GitHub", "list_repos")]


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_server_bound_by_its_url_is_exact_and_an_impersonator_refused(
    native, store_path, default_suite, stream
):
    native.responder = lambda body: {"content": None, "items": mcp_tool_uses("GitHub")}
    rules = {"gitlab.delete_*": "large"}
    with proxy_for(native, store_path, default_suite, required_tier=rules, mcp_servers=BOUND) as proxy:
        message = messages_answer(proxy, stream, mcp_servers=[url_server("GitHub")])
        assert [b.name for b in message.content] == ["delete_repo", "list_repos"]
        with pytest.raises(anthropic.BadRequestError, match=r"label 'github' is bound.*mcp\.evil\.example"):
            messages_answer(proxy, stream, mcp_servers=[url_server("github", EVIL_URL)])
    assert len(native.messages_requests) == 1


# -- translated: chat has no MCP servers ------------------------------------------------------


def test_a_renamed_server_never_reaches_a_chat_only_upstream(native, store_path, default_suite):
    with proxy_for(native, store_path, default_suite, protocols=("chat",)) as proxy:
        with pytest.raises(openai.BadRequestError, match="cannot be sent to a chat-only upstream"):
            proxy.client.responses.create(
                model="small-model", input="hi", tools=[mcp_tool("gh", allowed_tools=["delete_repo", "list_repos"])]
            )
        with pytest.raises(openai.BadRequestError, match="offered without a list"):
            proxy.client.responses.create(model="small-model", input="hi", tools=[mcp_tool("gh")])
        server = url_server("GitHub", tool_configuration={"allowed_tools": ["list_repos"]})
        with pytest.raises(anthropic.BadRequestError, match="cannot be sent to a chat-only upstream"):
            messages_answer(proxy, False, mcp_servers=[server])
    assert native.requests == [] and native.responses_requests == [] and native.messages_requests == []
