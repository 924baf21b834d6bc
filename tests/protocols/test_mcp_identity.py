"""MCP rules a client cannot escape by renaming the server (gatekeeper/rules/mcp_identity.py, the
ToolPolicy lookups in gatekeeper/rules/tools.py, the MCP gating of the Responses and Messages codecs).

Closed by default: a label no server-scoped rule names may be any server. Exact by configuration:
`tools.mcp_servers` binds labels to URLs / connector ids / tunnel ids. Through the real proxy:
tests/protocols/test_mcp_identity_proxy.py."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import settings_for
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gatekeeper import Gatekeeper
from gatekeeper.config import Settings, describe_errors
from gatekeeper.errors import RequestInvalid, ToolChoiceBlocked
from gatekeeper.inprocess.wrap import gate_body
from gatekeeper.protocols.base import Allowed
from gatekeeper.protocols.messages.codec import CODEC as MESSAGES
from gatekeeper.protocols.responses.codec import CODEC as RESPONSES
from gatekeeper.rules.mcp_identity import ServerBindings, normalise_url
from gatekeeper.rules.requirements import PairPolicy, Requirements
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy, fold_name

GITHUB_URL = "https://api.githubcopilot.com/mcp/"
EVIL_URL = "https://mcp.evil.example/github"
RULES = {"github.delete_*": Tier.LARGE, "gitlab.delete_*": Tier.MEDIUM}
GITHUB = ServerBindings.of({"github": {"urls": [GITHUB_URL]}, "gmail": {"connectors": ["connector_gmail"]}})


def policy(rules: dict[str, Tier] | None = None, servers: ServerBindings | None = None) -> ToolPolicy:
    return ToolPolicy(RULES if rules is None else rules, servers=servers)


# -- the rules: a label no rule names may be any server -----------------------------------------


def test_a_tool_of_a_label_no_rule_names_needs_the_highest_tier_of_every_server_scoped_rule_for_it():
    rules = policy()
    assert rules.required_tier(ToolId.mcp("gh", "delete_repo")) == Tier.LARGE  # github's rule wins
    assert rules.required_tier(ToolId.mcp("gh", "list_repos")) == Tier.SMALL
    assert rules.required_tier(ToolId.mcp("github", "delete_repo")) == Tier.LARGE


def test_a_label_a_rule_names_is_gated_by_its_own_rules_only():
    assert policy().required_tier(ToolId.mcp("gitlab", "delete_repo")) == Tier.MEDIUM


def test_bare_name_rules_keep_applying_to_every_server():
    rules = policy({"delete_*": Tier.MEDIUM, "github.drop": Tier.LARGE})
    assert rules.required_tier(ToolId.mcp("github", "delete_repo")) == Tier.MEDIUM
    assert rules.required_tier(ToolId.mcp("gh", "delete_repo")) == Tier.MEDIUM
    assert rules.required_tier(ToolId.mcp("gh", "drop")) == Tier.LARGE


def test_server_rules_with_a_wildcard_server_part_name_no_label_but_count_for_every_label():
    rules = policy({"git*.push": Tier.MEDIUM, "*.delete_repo": Tier.LARGE})
    assert rules.named_groups == frozenset()
    assert rules.required_tier(ToolId.mcp("gh", "push")) == Tier.MEDIUM
    assert rules.required_tier(ToolId.mcp("gh", "delete_repo")) == Tier.LARGE


def test_the_whole_server_rule_of_a_named_server_reaches_a_renamed_one():
    # `github` is named (by a scoped rule, or a binding): its whole-server rule may be meant for `gh`.
    assert policy({"github": Tier.LARGE, "github.list": Tier.SMALL}).required_tier(ToolId.mcp("gh", "x")) == Tier.LARGE
    bound = policy({"github": Tier.LARGE}, GITHUB)
    assert bound.required_tier(ToolId.mcp("gh", "x")) == Tier.LARGE
    # Without either, a dotless rule is a name like any other: it names no server.
    assert policy({"github": Tier.LARGE}).required_tier(ToolId.mcp("gh", "x")) == Tier.SMALL


def test_a_namespace_is_the_client_s_own_functions_where_only_its_own_and_bare_name_rules_reach():
    # The client could offer them bare as well: other groups' rules would add nothing but
    # hide Codex's MCP namespaces (`mcp__gatekeeper`) under any `files.*` rule.
    rules = policy({"crm.delete_*": Tier.LARGE, "files.*": Tier.LARGE, "purge": Tier.MEDIUM})
    assert rules.required_tier(ToolId.namespaced("crm2", "delete_contact")) == Tier.SMALL
    assert rules.required_tier(ToolId.namespaced("crm", "delete_contact")) == Tier.LARGE
    assert rules.required_tier(ToolId.namespaced("mcp__gatekeeper", "notes__read_note")) == Tier.SMALL
    assert rules.required_tier(ToolId.namespaced("ops", "purge")) == Tier.MEDIUM
    assert Requirements({"crm.delete_*": {"json": 0.9}}).of(ToolId.namespaced("crm2", "delete_x")) == {}


def test_a_label_no_rule_names_cannot_be_offered_whole_while_a_server_rule_is_above_the_tier():
    rules = policy()
    assert rules.rule_hiding_part_of("gh", Tier.SMALL) == "github.delete_*"
    assert rules.rule_hiding_part_of("gh", Tier.MEDIUM) == "github.delete_*"
    assert rules.rule_hiding_part_of("gh", Tier.LARGE) is None
    assert rules.rule_hiding_part_of("gitlab", Tier.MEDIUM) is None  # named: only its own rules
    assert policy({"github": Tier.LARGE, "github.x": Tier.SMALL}).rule_hiding_part_of("gh", Tier.SMALL) == "github"


# -- identities: URLs, connectors, tunnels ----------------------------------------------------


@pytest.mark.parametrize(
    "spelling",
    [
        "https://api.githubcopilot.com/mcp/",
        "https://api.githubcopilot.com/mcp",
        "HTTPS://API.GitHubCopilot.com:443/mcp//",
        "https://user:secret@api.githubcopilot.com/mcp/#frag",
        "https://api.githubcopilot.com./%6Dcp/",
    ],
)
def test_spellings_of_one_url_normalise_alike(spelling):
    assert normalise_url(spelling) == "https://api.githubcopilot.com/mcp"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:80/", "http://h"),
        ("http://h:8080/x", "http://h:8080/x"),
        ("https://h/x?toolsets=repos", "https://h/x?toolsets=repos"),
        ("https://[::1]:8443/m", "https://[::1]:8443/m"),
        ("https://h/a%2Fb", "https://h/a%2Fb"),  # an escaped '/' is not a '/'
    ],
)
def test_url_normalisation_keeps_what_tells_servers_apart(url, expected):
    assert normalise_url(url) == expected


@pytest.mark.parametrize("url", ["ftp://h/x", "https://", "not a url", "https://h:99999/x", "/relative"])
def test_what_is_not_an_http_url_has_no_normal_form(url):
    assert normalise_url(url) is None


def test_a_bound_url_makes_a_server_its_label_s_whatever_the_client_called_it():
    assert GITHUB.identify(
        "gh", [("urls", "tools[0].server_url", "https://API.githubcopilot.com/mcp")], "tools[0]"
    ) == ("github")
    assert GITHUB.identify("mail", [("connectors", "tools[0].connector_id", "connector_gmail")], "tools[0]") == "gmail"


def test_an_unbound_server_keeps_its_label():
    assert GITHUB.identify("gh", [("urls", "u", "https://elsewhere.example/mcp")], "w") == "gh"
    assert GITHUB.identify("gh", [("urls", "u", None)], "w") == "gh"


def test_a_bound_label_offered_with_another_url_is_refused_naming_the_label_and_the_url():
    with pytest.raises(RequestInvalid) as caught:
        GITHUB.identify("github", [("urls", "tools[0].server_url", "https://x:pw@mcp.evil.example/github")], "tools[0]")
    message = str(caught.value)
    assert "'github'" in message and "tools[0].server_url 'https://***@mcp.evil.example/github'" in message
    assert "pw" not in message


def test_a_bound_label_offered_with_no_identity_or_another_server_s_is_refused():
    with pytest.raises(RequestInvalid, match="offered with no URL"):
        GITHUB.identify("github", [("urls", "u", None)], "w")
    with pytest.raises(RequestInvalid, match="connector_gmail"):
        GITHUB.identify("github", [("connectors", "tools[0].connector_id", "connector_gmail")], "w")


def test_identities_bound_to_two_servers_are_refused():
    offered = [("urls", "tools[0].server_url", GITHUB_URL), ("connectors", "tools[0].connector_id", "connector_gmail")]
    with pytest.raises(RequestInvalid, match="one server has one identity"):
        GITHUB.identify("x", offered, "tools[0]")


def test_a_url_bound_twice_is_refused_when_the_bindings_are_built():
    with pytest.raises(ValueError, match="already bound to 'a'"):
        ServerBindings.of({"a": {"urls": ["https://h/m/"]}, "b": {"urls": ["HTTPS://h:443/m"]}})


# -- Responses: request side ------------------------------------------------------------------


def mcp_tool(label: str, url: str | None = GITHUB_URL, **extra: Any) -> dict[str, Any]:
    tool = {"type": "mcp", "server_label": label, **extra}
    if url is not None:
        tool["server_url"] = url
    return tool


def responses_gate(tools: list[dict[str, Any]], rules: ToolPolicy, tier: Tier = Tier.SMALL, **body: Any):
    request = {"model": "m", "input": "hi", "tools": tools, **body}
    return request, RESPONSES.gate(request, tier, rules)


@pytest.mark.parametrize("allowed", [None, {"read_only": True}])
def test_a_renamed_responses_server_without_a_tool_list_is_refused(allowed):
    tool = mcp_tool("gh") if allowed is None else mcp_tool("gh", allowed_tools=allowed)
    with pytest.raises(RequestInvalid, match=r"MCP server 'gh' is offered without a list.*'github\.delete_\*'") as e:
        responses_gate([tool], policy())
    assert "no rule names 'gh' and tools.mcp_servers does not bind it: it may be any server" in str(e.value)


def test_a_renamed_responses_server_is_narrowed_to_the_tools_the_tier_admits():
    body, gated = responses_gate([mcp_tool("gh", allowed_tools=["delete_repo", "list_repos"])], policy())
    assert body["tools"][0]["allowed_tools"] == ["list_repos"]
    assert gated.hidden == ["gh.delete_repo"]


def test_a_renamed_responses_server_is_narrowed_by_the_listing_the_request_carries():
    listing = {
        "type": "mcp_list_tools",
        "id": "mcpl_1",
        "server_label": "gh",
        "tools": [{"name": "delete_repo", "input_schema": {}}, {"name": "list_repos", "input_schema": {}}],
    }
    body, _ = responses_gate([mcp_tool("gh")], policy(), input=[listing])
    assert body["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [t["name"] for t in body["input"][0]["tools"]] == ["list_repos"]


def test_a_renamed_connector_is_gated_by_every_server_s_rules_until_it_is_bound():
    rules = {"gmail.send_*": Tier.LARGE}
    tool = mcp_tool("mail", url=None, connector_id="connector_gmail", allowed_tools=["send_email", "read_email"])
    body, _ = responses_gate([tool], policy(rules))
    assert body["tools"][0]["allowed_tools"] == ["read_email"]
    body, gated = responses_gate([dict(tool)], policy(rules, GITHUB))
    assert body["tools"][0]["allowed_tools"] == ["read_email"] and gated.servers == {"mail": "gmail"}


def test_a_server_bound_by_its_url_is_gated_by_its_label_s_rules_only():
    # gitlab's rule is not github's: once the URL says github, `gh` is exact, and offered whole.
    rules = policy({"gitlab.delete_*": Tier.LARGE}, GITHUB)
    body, gated = responses_gate([mcp_tool("gh")], rules)
    assert body["tools"] == [mcp_tool("gh")] and gated.kept == ["gh.*"] and gated.servers == {"gh": "github"}
    # ...and without the binding, `gh` may be gitlab.
    with pytest.raises(RequestInvalid, match=r"gitlab\.delete_"):
        responses_gate([mcp_tool("gh")], policy({"gitlab.delete_*": Tier.LARGE}))


def test_a_server_bound_by_its_url_meets_its_label_s_rules_under_any_label():
    rules = policy({"github.delete_*": Tier.LARGE, "*.delete_*": Tier.SMALL}, GITHUB)
    body, gated = responses_gate([mcp_tool("anything", allowed_tools=["delete_repo", "list"])], rules)
    assert body["tools"][0]["allowed_tools"] == ["list"] and gated.hidden == ["github.delete_repo"]


def test_a_responses_server_impersonating_a_bound_label_is_refused():
    with pytest.raises(RequestInvalid, match=r"label 'github' is bound.*tools\[0\]\.server_url 'https://mcp\.evil"):
        responses_gate([mcp_tool("github", url=EVIL_URL, allowed_tools=["list_repos"])], policy(servers=GITHUB))


def test_one_label_for_two_different_servers_is_refused():
    tools = [mcp_tool("gh", allowed_tools=["list"]), mcp_tool("gh", url=EVIL_URL, allowed_tools=["list"])]
    with pytest.raises(RequestInvalid, match="offered twice, for different servers"):
        responses_gate(tools, policy(servers=GITHUB))


def test_a_server_in_a_tool_search_output_is_identified_too():
    item = {"type": "tool_search_output", "call_id": "c", "tools": [mcp_tool("github", url=EVIL_URL)]}
    with pytest.raises(RequestInvalid, match=r"input\[0\]\.tools\[0\]"):
        RESPONSES.gate({"model": "m", "input": [item]}, Tier.SMALL, policy(servers=GITHUB))


def test_forcing_a_hidden_tool_of_a_renamed_server_is_blocked():
    choice = {"type": "mcp", "server_label": "gh", "name": "delete_repo"}
    with pytest.raises(ToolChoiceBlocked):
        responses_gate([mcp_tool("gh", allowed_tools=["list_repos"])], policy(), tool_choice=choice)


# -- Messages: request side -------------------------------------------------------------------


def messages_gate(servers: list[dict[str, Any]], rules: ToolPolicy, tools: list[dict[str, Any]] | None = None):
    body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    body["mcp_servers"] = servers
    if tools is not None:
        body["tools"] = tools
    return body, MESSAGES.gate(body, Tier.SMALL, rules)


def url_server(name: str, url: str = GITHUB_URL, **extra: Any) -> dict[str, Any]:
    return {"type": "url", "name": name, "url": url, **extra}


def test_a_renamed_messages_server_without_allowed_tools_is_refused():
    with pytest.raises(RequestInvalid, match=r"MCP server 'GitHub' is offered without a list"):
        messages_gate([url_server("GitHub")], policy())


def test_a_renamed_messages_server_with_a_whole_toolset_is_refused():
    toolset = {"type": "mcp_toolset", "mcp_server_name": "GitHub"}
    with pytest.raises(RequestInvalid, match=r"MCP server 'GitHub' is offered without a list"):
        messages_gate([url_server("GitHub")], policy(), [toolset])


def test_a_renamed_messages_server_is_narrowed_by_allowed_tools_and_by_a_toolset():
    config = {"allowed_tools": ["delete_repo", "list_repos"]}
    body, _ = messages_gate([url_server("GitHub", tool_configuration=config)], policy())
    assert body["mcp_servers"][0]["tool_configuration"]["allowed_tools"] == ["list_repos"]
    toolset = {
        "type": "mcp_toolset",
        "mcp_server_name": "GitHub",
        "default_config": {"enabled": False},
        "configs": {"delete_repo": {"enabled": True}, "list_repos": {"enabled": True}},
    }
    body, _ = messages_gate([url_server("GitHub")], policy(), [toolset])
    assert list(body["tools"][0]["configs"]) == ["list_repos"]


def test_a_messages_server_bound_by_its_url_is_exact_and_an_impersonator_is_refused():
    body, gated = messages_gate([url_server("GitHub")], policy({"gitlab.delete_*": Tier.LARGE}, GITHUB))
    assert body["mcp_servers"] == [url_server("GitHub")] and gated.servers == {"GitHub": "github"}
    with pytest.raises(RequestInvalid, match=r"label 'github' is bound.*mcp_servers\[0\]\.url"):
        messages_gate([url_server("github", EVIL_URL)], policy(servers=GITHUB))


# -- answers ----------------------------------------------------------------------------------


def mcp_call(label: str, name: str) -> dict[str, Any]:
    return {"type": "mcp_call", "id": f"mcp_{name}", "server_label": label, "name": name, "arguments": "{}"}


def responses_answer(*items: dict[str, Any]) -> dict[str, Any]:
    return {"id": "r", "object": "response", "status": "completed", "output": list(items)}


def test_an_answer_s_call_of_a_hidden_tool_of_a_renamed_server_is_removed():
    body, _ = responses_gate([mcp_tool("gh", allowed_tools=["delete_repo", "list_repos"])], policy())
    doc = responses_answer(mcp_call("gh", "delete_repo"), mcp_call("gh", "list_repos"))
    result = RESPONSES.enforce(doc, Allowed(RESPONSES.offered(body), Tier.SMALL, policy()))
    assert [i["name"] for i in doc["output"]] == ["list_repos"] and result.removed == ["gh.delete_repo"]


def test_a_whole_server_s_calls_are_judged_under_its_bound_label():
    rules = policy({"gitlab.delete_*": Tier.LARGE}, GITHUB)
    body, gated = responses_gate([mcp_tool("gh")], rules)
    offered = RESPONSES.offered(body)
    exact = Allowed(offered, Tier.SMALL, rules, servers=gated.servers)
    assert exact.admits(ToolId.mcp("gh", "delete_repo"))  # github's rules hide nothing
    # Without what gating learnt, `gh` may be gitlab: its delete_repo call would go (fail closed).
    assert not Allowed(offered, Tier.SMALL, rules).admits(ToolId.mcp("gh", "delete_repo"))


def test_a_messages_answer_s_call_of_a_hidden_tool_of_a_renamed_server_is_removed():
    config = {"allowed_tools": ["delete_repo", "list_repos"]}
    body, _ = messages_gate([url_server("GitHub", tool_configuration=config)], policy())
    blocks = [
        {"type": "mcp_tool_use", "id": f"mcptoolu_{n}", "server_name": "GitHub", "name": n, "input": {}}
        for n in ("delete_repo", "list_repos")
    ]
    doc = {"id": "m", "type": "message", "role": "assistant", "content": blocks, "stop_reason": "end_turn"}
    MESSAGES.enforce(doc, Allowed(MESSAGES.offered(body), Tier.SMALL, policy()))
    assert [b["name"] for b in doc["content"]] == ["list_repos"]


# -- configuration ----------------------------------------------------------------------------


def config_error(mcp_servers: Any) -> str:
    with pytest.raises(ValidationError) as caught:
        Settings.model_validate({"tools": {"mcp_servers": mcp_servers}})
    return describe_errors(caught.value)


def test_the_config_binds_labels_to_normalised_urls_and_connectors():
    settings = Settings.model_validate(
        {"tools": {"mcp_servers": {"github": {"urls": [GITHUB_URL]}, "gmail": {"connectors": ["connector_gmail"]}}}}
    )
    bindings = settings.mcp_bindings()
    assert bindings.labels == {"github", "gmail"}
    assert bindings.owners["urls"] == {"https://api.githubcopilot.com/mcp": "github"}
    assert bindings.owners["connectors"] == {"connector_gmail": "gmail"}


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ({"git.hub": {"urls": [GITHUB_URL]}}, "tools.mcp_servers: 'git.hub': a label is"),
        ({"git*": {"urls": [GITHUB_URL]}}, "without '.', spaces or wildcards"),
        ({"github": {}}, "tools.mcp_servers.github: expected at least one of urls, connectors, tunnels"),
        ({"github": {"urls": ["ftp://x/"]}}, "tools.mcp_servers.github.urls: [0] 'ftp://x/': expected an http(s) URL"),
        ({"github": {"url": GITHUB_URL}}, "tools.mcp_servers.github.url: unknown key"),
        (
            {"a": {"urls": [GITHUB_URL]}, "b": {"urls": ["HTTPS://API.GitHubCopilot.com:443/mcp"]}},
            "is already bound to 'a'",
        ),
        ({"a": {"connectors": [""]}}, "tools.mcp_servers.a.connectors.0"),
    ],
)
def test_a_bad_binding_is_refused_naming_its_field(servers, message):
    assert message in config_error(servers)


# -- tools.requires: category minimums follow the same identity ---------------------------------


def test_a_renamed_server_s_tool_meets_every_server_s_category_minimums_for_it():
    requires = Requirements({"github.delete_*": {"json": 0.9}, "gitlab.delete_*": {"json": 0.5, "toolCalling": 0.8}})
    assert requires.of(ToolId.mcp("gh", "delete_repo")) == {"json": 0.9, "toolCalling": 0.8}
    assert requires.of(ToolId.mcp("gh", "list_repos")) == {}
    assert requires.of(ToolId.mcp("github", "delete_repo")) == {"json": 0.9}  # named: its own rule


def test_a_label_the_tier_rules_or_bindings_name_is_named_for_requirements_too():
    rules = policy({"jira.create_*": Tier.MEDIUM}, GITHUB)
    requires = Requirements({"*.delete_*": {"json": 0.9}, "confluence.delete_page": {"json": 0.7}}, rules.named_groups)
    assert requires.of(ToolId.mcp("jira", "delete_page")) == {"json": 0.9}  # named: confluence's rule is not jira's
    assert requires.of(ToolId.mcp("wiki", "delete_page")) == {"json": 0.9}
    # ...and the tier policy counts requirement rules' servers as named.
    assert "confluence" in ToolPolicy({}, also_naming=["confluence.delete_page"]).named_groups


def test_an_unmet_minimum_of_any_server_keeps_a_renamed_server_from_being_offered_whole():
    requires = Requirements({"github.delete_*": {"json": 0.9}})
    unmeasured = PairPolicy(ToolPolicy(), requires, {})
    assert unmeasured.rule_hiding_part_of("gh", Tier.LARGE) == "github.delete_*"
    assert PairPolicy(ToolPolicy(), requires, {"json": 0.95}).rule_hiding_part_of("gh", Tier.LARGE) is None
    assert not unmeasured.allows(Tier.LARGE, ToolId.mcp("gh", "delete_repo"))


# -- properties: no label, no spelling opens it -----------------------------------------------

LABELS = st.text(st.characters(blacklist_characters=".", blacklist_categories=["Cs"]), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(label=LABELS)
def test_under_any_label_a_hidden_tool_is_neither_offered_nor_let_through(label):
    body, _ = responses_gate([mcp_tool(label, allowed_tools=["delete_repo", "list_repos"])], policy())
    doc = responses_answer(mcp_call(label, "delete_repo"), mcp_call(label, "list_repos"))
    RESPONSES.enforce(doc, Allowed(RESPONSES.offered(body), Tier.SMALL, policy()))
    if not fold_name(label).isascii():
        # A label outside ASCII may be a lookalike from another script: the strictest rule hides
        # the whole server (gating.ToolPolicy._tool_rule), so no call of it is kept.
        assert "tools" not in body and doc["output"] == []
        return
    assert body["tools"][0]["allowed_tools"] == ["list_repos"]
    assert [i["name"] for i in doc["output"]] == ["list_repos"]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    scheme=st.sampled_from(["https", "HTTPS", "Https"]),
    host=st.sampled_from(["api.githubcopilot.com", "API.GITHUBCOPILOT.COM", "Api.GitHubCopilot.com."]),
    port=st.sampled_from(["", ":443"]),
    slashes=st.sampled_from(["", "/", "//"]),
    label=LABELS,
)
def test_every_spelling_of_a_bound_url_is_its_server_under_any_label(scheme, host, port, slashes, label):
    url = f"{scheme}://{host}{port}/mcp{slashes}"
    assert GITHUB.identify(label if label != "gmail" else "x", [("urls", "u", url)], "w") == "github"


def test_a_bare_name_minimum_reaches_a_tool_inside_a_server_or_namespace():
    requires = Requirements({"delete_*": {"json": 0.9}})
    assert requires.of(ToolId.mcp("github", "delete_repo")) == {"json": 0.9}
    assert requires.of(ToolId.namespaced("ops", "delete_all")) == {"json": 0.9}
    unmeasured = PairPolicy(ToolPolicy(), requires, {})
    assert unmeasured.rule_hiding_part_of("github", Tier.LARGE) == "delete_*"  # so it is not offered whole


# -- in-process: the SDK wrappers and the LiteLLM hook gate with the same step ------------------


def test_the_in_process_request_step_resolves_server_identity_from_the_config(tmp_path):
    tools = {"required_tier": {"github.delete_*": "large"}, "mcp_servers": {"github": {"urls": [GITHUB_URL]}}}
    settings = settings_for("http://127.0.0.1:9/v1", tmp_path / "s.json", pins={"m": "small"}, tools=tools)
    with Gatekeeper(settings) as gk:
        with pytest.raises(RequestInvalid, match="offered without a list"):
            gate_body(gk, "responses", {"model": "m", "input": "hi", "tools": [mcp_tool("gh")]})
        with pytest.raises(RequestInvalid, match="label 'github' is bound"):
            gate_body(gk, "responses", {"model": "m", "input": "hi", "tools": [mcp_tool("github", url=EVIL_URL)]})
        body = {"model": "m", "input": "hi", "tools": [mcp_tool("gh", allowed_tools=["delete_repo", "list_repos"])]}
        _, gated = gate_body(gk, "responses", body)
    assert body["tools"][0]["allowed_tools"] == ["list_repos"] and gated.servers == {"gh": "github"}
