"""What the fifth red-team round (issue 20, on the main of 2026-12-01 after round 4) got through,
each sent by the official client (through the real proxy on a real port, or through the
in-process wrappers, `gatekeeper.adapters.openai_sdk` / `.anthropic_sdk`) to a real upstream
(tests/upstreams.py); what the upstream received, and what the client read, is the evidence.

- The in-process wrappers read the call's keyword arguments as given, but the SDKs take any
  iterable where they type `Iterable` and dump pydantic models: a message's `content` passed as
  a tuple (or the messages as a generator) holding a `tool_addition` block of a hidden tool, a
  Responses `input` passed as a tuple, or a `tool_search_output` item passed back as the SDK's own
  pydantic model, was "no tool field" to the wrapper (passed on untouched, ungated) and an array
  on the wire: the model was offered `execute_command`. The wrappers now read every argument as
  the SDK sends it (iterables as lists, models dumped as the SDK dumps them), so an answer's
  `content` blocks or `output` items passed back (the SDKs' canonical tool loops) are gated like
  dicts; they were refused ("must be an object, got ToolUseBlock") before. `gatekeeper.gate_body`
  itself skipped a Messages `content` that was a tuple (and a compaction's `tool_changes`):
  a content that is neither a string nor an array is a 400 now. And a call with a tool field but
  no string `model` was passed on untouched: `responses.create(prompt={"id": ...})` (a stored
  prompt brings its own tools; the proxy refuses `prompt`) reached the upstream ungated. It is
  gated, and refused there, now.
- The wrappers gated only what a call sends: a model that called a tool it was never offered
  (a hallucination, or a prompt naming the hidden tool) had the call reach the SDK, plain or
  streamed, and an agent framework runs any call its own (ungated) tool list has: the Agents
  SDK ran `execute_command` for a small model through a gated client. The wrappers now enforce
  answers as the proxy does, in the SDK client's HTTP transport (gatekeeper.inprocess.answers),
  whatever method made the call (`create`, `stream`, `with_raw_response`, the stream helpers).
  The transport runs the proxy's request step too: the SDK's low-level `client.post(
  "/chat/completions", body=...)` (public, for endpoints the SDK lacks) sent `execute_command`
  ungated past every wrapped method.
- Resources the wrappers did not route were the SDK's own, ungated: openai's
  `beta.chat.completions` and `beta.responses` (the same endpoints), anthropic's
  `beta.messages.tool_runner`, `beta.messages.thread` and `messages.batches.create` (each batch
  request carries its own tools). A gated resource is closed now: the gated calls, and calls on
  stored objects (retrieve, list, delete, ...), pass; anything else (those, `responses.compact`,
  `responses.connect`) raises RequestInvalid when called. So does every other resource of the
  client but those that run no model with tools (files, models, embeddings, ...): openai's
  `beta.assistants` / `.threads` (tools on assistants and runs), `realtime`, `batches`, `evals`,
  anthropic's managed `beta.agents` / `.sessions` / `.deployments` went ungated.
- `ToolRegistry` read a tool's rule once, at registration: after a reload that raised
  `execute_command` to large (SIGHUP, `POST /admin/reload`, `Gatekeeper.reload`), a small model
  was still offered it and `registry.call` still ran it. The rule is read from the settings in
  force at each listing and call (a tier given at registration still beats it).
- `gate_agent` judged the Agents SDK's hosted tools by their runtime name: `LocalShellTool` is
  `local_shell`, which a family rule `shell: large` did not reach, and a `HostedMCPTool` was one
  tool named `hosted_mcp`, so `github.delete_*: large` left `delete_repo` in its `allowed_tools`.
  Built-ins are judged by their type and family now, an MCP server by the Responses codec's own
  gate (narrowed to the admitted tools, or refused without a tool list).
- `Gatekeeper.filter_tools` / `.allowed` and the `gated` wrapper judged a tool by its name as a
  plain string: a built-in family rule (`web_search: large`, `shell: large`) did not reach
  `{"type": "web_search_preview"}` or `{"type": "local_shell"}`, and `gated` judged a typed tool
  by the `name` put on it (`{"type": "computer_20250124", "name": "computer_notes"}` passed
  `computer: large`). A listed tool is judged by its typed identity in any protocol's shape
  (gating.listed_tool_id); an MCP server or a namespace in a flat list is RequestInvalid.
- A lazy measurement against an upstream that quotes the credential it got (`Incorrect API key
  provided: Bearer sk-...`) wrote the operator's `upstream.api_key` into every
  `measurement_failed` / `measurement_not_landed` / `backend_retry` log line (round 4 scrubbed
  it from the errors relayed to clients, not from the measurement's own). The backends scrub
  their credentials from what they quote, before it is cut.
- A body nested deeper than 254 levels (orjson reads 1024, writes 254), in a tool's parameters
  schema, was read, gated and then failed to be written for the upstream: a 500 "internal
  error" with a traceback logged. It is a 400 naming why now; an upstream answer nested that
  deep (with a call marker, so it is re-written after enforcement) a 502 `upstream_invalid`.
- Round 4 refused an input approving (`mcp_approval_response`) a hidden MCP call the same input
  requests, but judged only the last `mcp_approval_request` of an id: two of one id, the first
  for `github.delete_repo` and the second for `github.list_repos`, passed, and which one the
  server runs is the server's guess. Every request of the approved id is judged now.
- The LiteLLM hook set aside every key of a request that the protocol's table does not list
  (to leave LiteLLM's own bookkeeping alone), and LiteLLM sends every key it does not own on to
  the provider (`add_provider_specific_params_to_optional_params`): a chat call carrying a
  top-level `mcp_servers` (or Gemini's `tool_config`, a Responses call's `messages`) reached the
  provider ungated; for an Anthropic model that is an MCP server the model may use. Only keys
  LiteLLM owns are set aside now; any other is checked as the proxy checks it (400 under
  `unknown_fields: refuse`). Through a real LiteLLM proxy: the upstream received `mcp_servers`.
  A request with tools whose `model` is not a string (a list) was passed on ungated; refused.
  And round 2's refusal of `fallbacks` with tools missed the same lists in
  `router_settings_override`, which LiteLLM's proxy applies from the body: big-model's large-tier
  tools went to local-model when big-model failed. Refused with tools now (as is `user_config`,
  a router of the client's own, should a LiteLLM admin let clients send one).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import openai
import pytest
import structlog
import test_hostile_litellm
from anthropic.types import ToolUseBlock
from conftest import TOOLS, running_proxy, settings_for, wait_until
from openai.types.responses import ResponseFunctionToolCall, ResponseToolSearchOutputItem
from scripted import RawAnswer, RawUpstream
from upstreams import NativeServer

from gatekeeper import Gatekeeper, ToolRegistry, gate_body
from gatekeeper.adapters import anthropic_sdk, openai_sdk
from gatekeeper.errors import RequestInvalid, ToolNotAllowed
from gatekeeper.inprocess.wrap import gate_agent, gated

# Under settings_for's rules (conftest): read_file small, write_file medium, execute_command large.
CLAUDE_TOOL = {"name": "execute_command", "input_schema": {"type": "object", "properties": {}}}
CLAUDE_READ = {"name": "read_file", "input_schema": {"type": "object", "properties": {}}}
RESPONSES_TOOL = {"type": "function", "name": "execute_command", "parameters": {"type": "object", "properties": {}}}
RESPONSES_READ = {"type": "function", "name": "read_file", "parameters": {"type": "object", "properties": {}}}
CHAT_TOOL = {"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
def upstream() -> Iterator[NativeServer]:  # overrides conftest's: the seeded `gk` fixture uses it
    with NativeServer(lambda body: {"content": "ok"}) as server:
        yield server


def received_text(upstream: NativeServer) -> str:
    return repr(upstream.received())


def gated_openai(upstream: NativeServer, gk) -> openai.OpenAI:
    return openai_sdk.gate_client(openai.OpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)


def gated_claude(upstream: NativeServer, gk) -> anthropic.Anthropic:
    base = upstream.base_url.removesuffix("/v1")
    return anthropic_sdk.gate_client(anthropic.Anthropic(base_url=base, api_key="x", max_retries=0), gk)


# -- the wrappers read arguments as the SDK sends them --------------------------------------------


def test_a_tuple_of_content_blocks_is_gated(upstream, gk):
    claude = gated_claude(upstream, gk)
    addition = {"type": "tool_addition", "tool": CLAUDE_TOOL}
    message = claude.messages.create(
        model="small-model",
        max_tokens=5,
        messages=[{"role": "user", "content": ({"type": "text", "text": "hi"}, addition)}],
    )
    assert message.content[0].text == "ok"
    claude.beta.messages.create(
        model="small-model", max_tokens=5, messages=(m for m in [{"role": "user", "content": [addition]}])
    )
    assert len(upstream.messages_requests) == 2
    assert "execute_command" not in received_text(upstream)
    assert upstream.messages_requests[0]["messages"][0]["content"] == [{"type": "text", "text": "hi"}]


async def test_a_tuple_input_is_gated_async(upstream, gk):
    client = openai_sdk.gate_client(openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk)
    await client.responses.create(model="small-model", input=({"type": "additional_tools", "tools": [RESPONSES_TOOL]},))
    assert len(upstream.responses_requests) == 1
    assert "execute_command" not in received_text(upstream)


def test_an_output_item_passed_back_as_a_model_is_gated(upstream, gk):
    loaded = ResponseToolSearchOutputItem.model_validate(
        {
            "type": "tool_search_output",
            "id": "ts_1",
            "call_id": "c_1",
            "execution": "client",
            "status": "completed",
            "tools": [RESPONSES_TOOL],
        }
    )
    gated_openai(upstream, gk).responses.create(model="small-model", input=[loaded])
    assert len(upstream.responses_requests) == 1
    assert "execute_command" not in received_text(upstream)


def test_the_sdks_tool_loops_pass_answer_objects_back(upstream, gk):
    """The canonical loops append the answer's own objects to the next request: they were
    refused ("must be an object, got ToolUseBlock"); they are sent as the SDK dumps them."""
    call = ToolUseBlock(type="tool_use", id="toolu_1", name="read_file", input={"path": "a"})
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "text of a"}
    gated_claude(upstream, gk).messages.create(
        model="small-model",
        max_tokens=5,
        tools=[CLAUDE_READ, CLAUDE_TOOL],
        messages=[*HI, {"role": "assistant", "content": [call]}, {"role": "user", "content": [result]}],
    )
    sent = upstream.messages_requests[-1]
    assert [t["name"] for t in sent["tools"]] == ["read_file"]
    assert sent["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}
    ]
    item = ResponseFunctionToolCall(type="function_call", call_id="c_1", name="read_file", arguments="{}")
    output = {"type": "function_call_output", "call_id": "c_1", "output": "text of a"}
    gated_openai(upstream, gk).responses.create(model="small-model", tools=[RESPONSES_READ], input=[*HI, item, output])
    assert upstream.responses_requests[-1]["input"][1]["name"] == "read_file"


def test_a_call_without_a_model_is_gated_not_waved_through(upstream, gk):
    with pytest.raises(RequestInvalid, match="'model' is required"):
        gated_openai(upstream, gk).responses.create(prompt={"id": "pmpt_1"}, input="hi")
    assert upstream.received() == []


def test_gate_body_refuses_content_it_cannot_read(gk):
    addition = {"type": "tool_addition", "tool": CLAUDE_TOOL}
    with pytest.raises(RequestInvalid, match=r"messages\[0\]\.content must be a string or an array"):
        gate_body(
            gk,
            "messages",
            {"model": "small-model", "max_tokens": 5, "messages": [{"role": "user", "content": (addition,)}]},
        )
    compaction = {
        "type": "compaction",
        "content": "...",
        "tool_changes": ({"type": "tool_addition", "tool": CLAUDE_TOOL},),
    }
    with pytest.raises(RequestInvalid, match=r"tool_changes must be an array"):
        gate_body(
            gk,
            "messages",
            {"model": "small-model", "max_tokens": 5, "messages": [{"role": "user", "content": [compaction]}]},
        )


# -- a gated resource is closed ---------------------------------------------------------------


def test_beta_paths_to_the_same_endpoints_are_gated(upstream, gk):
    client = gated_openai(upstream, gk)
    client.beta.chat.completions.create(model="small-model", messages=HI, tools=[CHAT_TOOL])
    client.beta.responses.create(model="small-model", input="hi", tools=[RESPONSES_TOOL])
    assert len(upstream.requests) == 1 and len(upstream.responses_requests) == 1
    assert "execute_command" not in received_text(upstream)


def test_calls_the_gate_cannot_see_through_are_refused(upstream, gk):
    claude = gated_claude(upstream, gk)
    with pytest.raises(RequestInvalid, match=r"beta\.messages\.tool_runner is not gated"):
        claude.beta.messages.tool_runner(model="small-model", max_tokens=5, messages=HI, tools=[CLAUDE_TOOL])
    with pytest.raises(RequestInvalid, match=r"beta\.messages\.thread is not gated"):
        claude.beta.messages.thread(model="small-model", max_tokens=5, tools=[CLAUDE_TOOL])
    batch = {
        "custom_id": "a",
        "params": {"model": "small-model", "max_tokens": 5, "messages": HI, "tools": [CLAUDE_TOOL]},
    }
    with pytest.raises(RequestInvalid, match=r"messages\.batches\.create is not gated"):
        claude.messages.batches.create(requests=[batch])
    with pytest.raises(RequestInvalid, match=r"responses\.compact is not gated"):
        gated_openai(upstream, gk).responses.with_raw_response.compact(model="small-model", input="hi")
    assert upstream.received() == []


def test_other_apis_that_run_models_with_tools_are_refused(upstream, gk):
    client = gated_openai(upstream, gk)
    with pytest.raises(RequestInvalid, match=r"beta\.assistants\.create is not gated"):
        client.beta.assistants.create(model="small-model", tools=[CHAT_TOOL])  # type: ignore[list-item]
    with pytest.raises(RequestInvalid, match=r"batches\.create is not gated"):
        client.batches.create(input_file_id="file_1", endpoint="/v1/chat/completions", completion_window="24h")
    with pytest.raises(RequestInvalid, match=r"beta\.agents\.create is not gated"):
        gated_claude(upstream, gk).beta.agents.create(model="small-model", name="a")  # type: ignore[call-arg]
    assert upstream.received() == []
    assert [m.id for m in client.models.list()] == list(upstream.models)  # a tool-free resource passes


def test_calls_on_stored_objects_still_pass(upstream, gk):
    client = gated_openai(upstream, gk)
    with pytest.raises(openai.NotFoundError):  # the upstream stores nothing: it answered, which is the point
        client.responses.retrieve("resp_1")


# -- ToolRegistry follows a reload ------------------------------------------------------------


def test_the_registry_applies_a_reloaded_rule_at_once(tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    common = f"upstream: {{base_url: 'http://127.0.0.1:9/v1'}}\nstore: {tmp_path / 'store.json'}\npins: {{m: small}}\n"
    config.write_text(common + "tools: {required_tier: {}}\n")
    gk = Gatekeeper.from_config(config)
    try:
        registry = ToolRegistry(gk)
        registry.register({"type": "function", "function": {"name": "execute_command"}}, handler=lambda: "ran")
        registry.register(
            {"type": "function", "function": {"name": "note"}}, required_tier="small", handler=lambda: "ok"
        )
        assert [t["function"]["name"] for t in registry.list_for_llm("m")] == ["execute_command", "note"]
        config.write_text(common + "tools: {required_tier: {execute_command: large, note: large}}\n")
        gk.reload()
        assert [t["function"]["name"] for t in registry.list_for_llm("m")] == ["note"]  # its own tier beats the rule
        with pytest.raises(ToolNotAllowed, match="requires tier 'large'"):
            registry.call("m", "execute_command", "{}")
        assert registry.get("execute_command").required_tier.value == "large"
    finally:
        gk.close()


# -- gate_agent judges hosted tools as the proxy does ----------------------------------------------


async def test_gate_agent_judges_hosted_tools_by_type_and_server(upstream, store_path, default_suite):
    from agents import Agent, HostedMCPTool, LocalShellTool, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)  # traces would be exported to OpenAI
    rules = {"required_tier": {"shell": "large", "github.delete_*": "large"}}
    gk = Gatekeeper(settings_for(upstream.base_url, store_path, pins={"m": "small"}, tools=rules))
    try:
        github = {"type": "mcp", "server_label": "github", "server_url": "https://mcp.example/github"}
        tools = [HostedMCPTool(tool_config=github | {"allowed_tools": ["list_repos", "delete_repo"]})]
        tools.append(LocalShellTool(executor=lambda request: "ran"))
        agent = gate_agent(gk, Agent(name="a", model="m", tools=tools))
        model = OpenAIResponsesModel("m", openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x"))
        result = await Runner.run(agent.clone(model=model), "hi")
        assert result.final_output == "ok"
        sent = upstream.responses_requests[-1]["tools"]
        assert sent == [github | {"allowed_tools": ["list_repos"]}]
        with pytest.raises(RequestInvalid, match="without a list of its tools"):
            gate_agent(gk, Agent(name="a", model="m", tools=[HostedMCPTool(tool_config=github)]))
    finally:
        gk.close()


# -- flat tool lists are judged by identity --------------------------------------------------------


FAMILY_RULES = {"required_tier": {"web_search": "large", "shell": "large", "computer": "large", "text_editor": "large"}}


def test_filter_tools_applies_built_in_families(upstream, store_path, default_suite):
    gk = Gatekeeper(settings_for(upstream.base_url, store_path, pins={"m": "small"}, tools=FAMILY_RULES))
    try:
        read = {"type": "function", "function": {"name": "read_file"}}
        listed = [{"type": "web_search_preview"}, {"type": "local_shell"}, read]
        assert gk.filter_tools("m", None, listed) == [read]
        with pytest.raises(RequestInvalid, match="cannot be judged in a list"):
            gk.filter_tools("m", None, [{"type": "mcp", "server_label": "github"}])
    finally:
        gk.close()


async def test_gated_judges_a_typed_tool_by_its_type(upstream, store_path, default_suite):
    gk = Gatekeeper(settings_for(upstream.base_url, store_path, pins={"m": "small"}, tools=FAMILY_RULES))
    try:
        read = {"name": "read_file", "input_schema": {"type": "object"}}
        listed = [
            {"type": "computer_20250124", "name": "computer_notes", "display_width_px": 1, "display_height_px": 1},
            {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
            read,
        ]

        async def list_for_llm(model: str) -> list[dict]:
            return listed

        assert await gated(gk, list_for_llm)("m") == [read]
    finally:
        gk.close()


# -- no operator credential in a measurement's log lines ---------------------------------------------

OPERATOR_KEY = "sk-operator-Secret-5151"


def test_a_measurement_never_logs_the_key_an_upstream_quotes(store_path):
    with RawUpstream() as upstream:

        def echoing(body: dict) -> RawAnswer:
            quoted = {"message": f"Incorrect API key provided: {upstream.headers[-1].get('authorization')}"}
            return RawAnswer(json.dumps({"error": quoted}).encode(), status=401)

        upstream.answer = echoing
        settings = settings_for(
            upstream.base_url, store_path, upstream={"base_url": upstream.base_url, "api_key": OPERATOR_KEY}
        )
        with running_proxy(settings) as proxy, structlog.testing.capture_logs() as lines:
            with pytest.raises(openai.AuthenticationError):  # the client's own request, after the measurement started
                proxy.client.chat.completions.create(model="new-model", messages=HI, tools=TOOLS)
            failed = wait_until(lambda: [line for line in lines if line["event"] == "measurement_failed"], "a failure")
    assert any(h.get("authorization") == f"Bearer {OPERATOR_KEY}" for h in upstream.headers)  # sent, and quoted
    assert "Incorrect API key provided: Bearer ***" in failed[0]["error"]
    assert OPERATOR_KEY not in repr(lines)


# -- nesting orjson cannot write ----------------------------------------------------------------------


def nested(levels: int) -> dict:
    schema: dict = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_a_body_nested_too_deep_to_forward_is_a_400_and_an_answer_a_502(store_path):
    deep_answer = {"choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": []}}], "x": nested(300)}
    with RawUpstream(RawAnswer(json.dumps(deep_answer).encode())) as upstream:
        with running_proxy(settings_for(upstream.base_url, store_path, pins={"m": "small"})) as proxy:
            deep_tool = {"type": "function", "function": {"name": "read_file", "parameters": nested(300)}}
            with pytest.raises(openai.BadRequestError, match="nested over 254 levels"):
                proxy.client.chat.completions.create(model="m", messages=HI, tools=[deep_tool])
            assert upstream.requests == []
            with pytest.raises(openai.InternalServerError) as answer:
                proxy.client.chat.completions.create(model="m", messages=HI, tools=TOOLS[:1])
    assert answer.value.status_code == 502 and "cannot be relayed" in str(answer.value)


# -- Responses: an approval whose id names two requests ---------------------------------------------


def test_an_approval_naming_two_requests_judges_both(store_path, default_suite):
    from conftest import small_model_proxy

    server = {"type": "mcp", "server_label": "github", "server_url": "https://mcp.example/github"}
    server["allowed_tools"] = ["list_repos"]

    def request(name: str) -> dict:
        return {
            "type": "mcp_approval_request",
            "id": "mcpr_1",
            "server_label": "github",
            "name": name,
            "arguments": "{}",
        }

    yes = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    rules = {"default_tier": "small", "required_tier": {"github.delete_*": "large"}}
    with NativeServer(lambda body: {"content": "ok"}) as native:
        settings = {"base_url": native.base_url, "protocols": ["chat", "responses", "messages"]}
        with small_model_proxy(native.base_url, store_path, default_suite, upstream=settings, tools=rules) as proxy:
            for twice in (
                [request("delete_repo"), request("list_repos")],
                [request("list_repos"), request("delete_repo")],
            ):
                with pytest.raises(openai.BadRequestError, match=r"approves a call to 'github\.delete_repo'"):
                    proxy.client.responses.create(model="small-model", input=[*twice, yes], tools=[server])  # type: ignore[arg-type,list-item]
            assert native.responses_requests == []
            proxy.client.responses.create(model="small-model", input=[request("list_repos"), yes], tools=[server])  # type: ignore[arg-type,list-item]
    assert native.responses_requests[-1]["input"][1]["approve"] is True


# -- the LiteLLM hook: keys LiteLLM does not own reach the provider -----------------------------------


# LiteLLM serving big-model (large, overloaded) and local-model (small): the same proxy as
# test_hostile_litellm.py's, started once more for this module.
litellm_proxy = test_hostile_litellm.litellm_proxy


def test_the_litellm_hook_checks_keys_litellm_would_pass_to_the_provider(litellm_proxy):
    client, upstream = litellm_proxy
    seen = len(upstream.requests)
    github = {"type": "url", "name": "github", "url": "https://mcp.example/github"}
    read = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError, match="'mcp_servers' is not a field gatekeeper knows"):
        client.chat.completions.create(
            model="local-model", messages=HI, tools=[read], extra_body={"mcp_servers": [github]}
        )
    assert upstream.requests[seen:] == []
    client.chat.completions.create(model="local-model", messages=HI, tools=[read], user="u1")  # known fields pass
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]


async def test_the_litellm_hook_refuses_tools_for_a_model_that_is_no_name(gk):
    from fastapi import HTTPException

    from gatekeeper.adapters.litellm_hook import GatekeeperHook

    data = {"model": ["small-model", "large-model"], "messages": HI, "tools": [CHAT_TOOL]}
    with pytest.raises(HTTPException, match="must be a non-empty string"):
        await GatekeeperHook(gk).async_pre_call_hook(None, None, data, "acompletion")


# -- the wrappers enforce answers ----------------------------------------------------------------------


def hidden_call(body: dict) -> dict:
    """An upstream whose model calls execute_command whatever it was offered."""
    return {"content": None, "tool_calls": [{"name": "execute_command", "arguments": {"command": "rm -rf /"}}]}


@pytest.fixture
def calling() -> Iterator[NativeServer]:
    with NativeServer(hidden_call) as server:
        yield server


def test_a_hidden_call_in_a_wrapped_answer_never_reaches_the_sdk(calling, gk):
    client = gated_openai(calling, gk)
    READ_CHAT = {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}
    chat = client.chat.completions.create(model="small-model", messages=HI, tools=[READ_CHAT])
    assert chat.choices[0].message.tool_calls is None and chat.choices[0].finish_reason == "stop"
    raw = client.chat.completions.with_raw_response.create(model="small-model", messages=HI, tools=[READ_CHAT])
    assert "execute_command" not in raw.http_response.text
    with client.chat.completions.stream(model="small-model", messages=HI, tools=[READ_CHAT]) as stream:
        assert stream.get_final_completion().choices[0].message.tool_calls is None
    response = client.responses.create(model="small-model", input="hi", tools=[RESPONSES_READ])
    assert [item.type for item in response.output] == []
    with client.responses.stream(model="small-model", input="hi", tools=[RESPONSES_READ]) as stream:
        assert [item.type for item in stream.get_final_response().output] == []
    claude = gated_claude(calling, gk)
    message = claude.messages.create(model="small-model", max_tokens=5, messages=HI, tools=[CLAUDE_READ])
    assert message.content == [] and message.stop_reason == "end_turn"
    with claude.beta.messages.stream(model="small-model", max_tokens=5, messages=HI, tools=[CLAUDE_READ]) as stream:
        assert stream.get_final_message().content == []
    # the tool was offered to none of them, and the upstream did call it
    assert "execute_command" not in received_text(calling)


def test_the_transport_leaves_the_callers_log_context_as_it_was(upstream, gk):
    structlog.contextvars.clear_contextvars()
    with structlog.contextvars.bound_contextvars(job="mine"):
        gated_openai(upstream, gk).chat.completions.create(model="small-model", messages=HI, tools=[CHAT_TOOL])
        assert structlog.contextvars.get_contextvars() == {"job": "mine"}


def test_the_sdks_low_level_post_is_gated_too(upstream, gk):
    import httpx

    client = gated_openai(upstream, gk)
    body = {"model": "small-model", "messages": HI, "tools": [CHAT_TOOL]}
    client.post("/chat/completions", body=body, cast_to=httpx.Response)
    force = {"type": "function", "function": {"name": "execute_command"}}
    with pytest.raises(openai.BadRequestError, match="tool_choice forces tool 'execute_command'"):
        client.post("/chat/completions", body=body | {"tool_choice": force}, cast_to=httpx.Response)
    claude = gated_claude(upstream, gk)
    claude.post(
        "/v1/messages",
        body={"model": "small-model", "max_tokens": 5, "messages": HI, "tools": [CLAUDE_TOOL]},
        cast_to=object,
    )
    assert len(upstream.requests) == 1 and len(upstream.messages_requests) == 1
    assert "execute_command" not in received_text(upstream)


async def test_a_hidden_call_never_reaches_an_async_wrapped_sdk(calling, gk):
    client = openai_sdk.gate_client(openai.AsyncOpenAI(base_url=calling.base_url, api_key="x", max_retries=0), gk)
    stream = await client.responses.create(model="small-model", input="hi", tools=[RESPONSES_READ], stream=True)
    kinds = [event.type async for event in stream]
    assert "response.completed" in kinds and "response.function_call_arguments.delta" not in kinds
    base = calling.base_url.removesuffix("/v1")
    claude = anthropic_sdk.gate_client(anthropic.AsyncAnthropic(base_url=base, api_key="x", max_retries=0), gk)
    async with claude.messages.stream(model="small-model", max_tokens=5, messages=HI, tools=[CLAUDE_READ]) as events:
        assert (await events.get_final_message()).content == []


async def test_an_agent_framework_no_longer_runs_a_hidden_tool_through_a_gated_client(store_path, default_suite):
    """The Agents SDK runs any call its own tool list has: the gated request offered only
    read_file, the model called execute_command anyway, and it ran."""
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)  # traces would be exported to OpenAI
    ran: list[str] = []
    answers = iter([hidden_call({}), {"content": "done"}])
    with NativeServer(lambda body: next(answers)) as upstream:
        gk = Gatekeeper(
            settings_for(upstream.base_url, store_path, pins={"small-model": "small"}, blocked_calls="explain")
        )
        try:
            client = openai_sdk.gate_client(
                openai.AsyncOpenAI(base_url=upstream.base_url, api_key="x", max_retries=0), gk
            )
            tools = [
                function_tool(lambda: ran.append("read_file") or "text", name_override="read_file"),
                function_tool(lambda command: ran.append("execute_command") or "ran", name_override="execute_command"),
            ]
            agent = Agent(name="a", model=OpenAIResponsesModel("small-model", client), tools=tools)
            result = await Runner.run(agent, "hi")
        finally:
            gk.close()
    assert ran == []
    assert "execute_command" in str(result.final_output) and "needs tier large" in str(result.final_output)


def test_fallbacks_by_another_key_never_carry_a_large_tier_s_tools(litellm_proxy):
    client, upstream = litellm_proxy
    rerouting = {"router_settings_override": {"fallbacks": [{"big-model": ["local-model"]}]}}
    seen = len(upstream.requests)
    big_tool = {"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError, match="another model"):
        client.chat.completions.create(model="big-model", messages=HI, tools=[big_tool], extra_body=rerouting)
    assert upstream.requests[seen:] == []
