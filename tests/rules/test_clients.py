"""Per-client policy (gatekeeper/rules/clients.py), pure: which configured client a presented
identity is, and the stricter of its rules and the global ones."""

from __future__ import annotations

import hashlib

from gatekeeper.rules.arguments import ArgumentRule
from gatekeeper.rules.clients import ClientPolicy, ClientRules, Clients, ceiling
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

SMALL, MEDIUM, LARGE = Tier.SMALL, Tier.MEDIUM, Tier.LARGE
GLOBAL = ToolPolicy(
    {"execute_command": LARGE},
    arguments={"execute_command": [ArgumentRule.model_validate({"match": {"command": "ls *"}, "tier": "small"})]},
)


def client(**rules: object) -> ClientPolicy:
    return ClientPolicy(GLOBAL, "c", ClientRules.model_validate({"match": {"header": "c"}} | rules))


def test_a_denied_tool_is_hidden_also_under_a_lookalike_name_or_inside_a_server():
    policy = client(tools={"deny": ["delete_*"]})
    for tool in ("delete_repo", "DELETE_REPO", "delete_repo\u200b", ToolId.mcp("github", "delete_repo")):
        assert not policy.allows(LARGE, tool), tool
    assert policy.allows(LARGE, "read_file")


def test_an_allowlist_admits_only_the_names_it_lists_exactly():
    policy = client(tools={"allow": ["read_*"]})
    assert policy.allows(SMALL, "read_file")
    assert not policy.allows(LARGE, "READ_FILE") and not policy.allows(LARGE, "write_file")


def test_a_clients_argument_rules_only_ever_raise():
    lowering = {"execute_command": [{"match": {"command": "*"}, "tier": "small"}]}
    policy = client(arguments=lowering)
    assert policy.call_tier("execute_command", '{"command": "rm -rf /"}') is LARGE  # the global rule stands
    raising = client(arguments={"execute_command": [{"match": {"command": "ls /secrets*"}, "tier": "large"}]})
    assert raising.call_tier("execute_command", '{"command": "ls /secrets/key"}') is LARGE
    assert raising.call_tier("execute_command", '{"command": "ls /tmp"}') is SMALL


def test_the_ceiling_lowers_the_tier_and_never_raises_it():
    rules = ClientRules.model_validate({"match": {"header": "c"}, "max_tier": "medium"})
    assert ceiling(LARGE, rules) is MEDIUM and ceiling(SMALL, rules) is SMALL and ceiling(LARGE, None) is LARGE


def test_a_client_is_found_by_its_credentials_digest_or_its_header():
    clients = Clients(
        {
            "bot": ClientRules.model_validate({"match": {"credential_sha256": hashlib.sha256(b"sk-1").hexdigest()}}),
            "team": ClientRules.model_validate({"match": {"header": "team-a"}}),
        }
    )
    assert clients.name_of(("key", "sk-1")) == "bot"
    assert clients.name_of(("key", "sk-2")) is None
    assert clients.name_of(("hdr", "team-a")) == "team"
    assert clients.name_of(("key", "team-a")) is None  # a credential is never matched as a header value
    assert clients.name_of(("hdr", hashlib.sha256(b"sk-1").hexdigest())) is None
    assert clients.name_of(None) is None
