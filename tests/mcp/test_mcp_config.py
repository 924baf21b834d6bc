"""The `mcp:` config section and the tool name scheme: bad config is refused at start-up, naming
the key's path; exposed names are valid function names and split back without ambiguity."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.config import load_settings
from gatekeeper.errors import ConfigError
from gatekeeper.mcp.names import exposed_name, rule_name, split_exposed, unusable


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(text)
    return path


def test_the_issue_example_loads_with_variables_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("GATEKEEPER_MCP_KEY", "door-key")
    monkeypatch.setenv("TIME_KEY", "time-secret")
    settings = load_settings(
        write(
            tmp_path,
            """
mcp:
  api_keys: ["${GATEKEEPER_MCP_KEY}"]   # quoted: `[${...}]` is not valid YAML
  servers:
    files:
      command: [npx, -y, "@modelcontextprotocol/server-filesystem", /srv/data]
    time:
      url: http://127.0.0.1:9100/mcp
      headers: {Authorization: "Bearer ${TIME_KEY}"}
tools:
  required_tier:
    "files.read_*": small
    "files.write_file": medium
""",
        )
    )
    assert settings.mcp.keys == ["door-key"]
    assert settings.mcp.servers["files"].command == [
        "npx",
        "-y",
        "@modelcontextprotocol/server-filesystem",
        "/srv/data",
    ]
    assert settings.mcp.servers["time"].headers == {"Authorization": "Bearer time-secret"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mcp:\n  servers:\n    files: {command: [x]}\n", r"mcp: .*api_keys: required when servers are set"),
        ("mcp:\n  api_keys: ['  ']\n  servers:\n    f: {command: [x]}\n", r"mcp: .*api_keys\[0\]: empty or blank"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    f: {}\n", r"mcp\.servers\.f: .*exactly one of `command`"),
        (
            "mcp:\n  api_keys: [k]\n  servers:\n    f: {command: [x], url: 'http://h'}\n",
            r"mcp\.servers\.f: .*exactly one",
        ),
        ("mcp:\n  api_keys: [k]\n  servers:\n    f: {url: 'ftp://h'}\n", r"mcp\.servers\.f: .*http\(s\) URL"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    f: {command: []}\n", r"mcp\.servers\.f\.command"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    f: {command: [x], headers: {a: b}}\n", r"headers: only for a `url`"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    f: {url: 'http://h', env: {a: b}}\n", r"env: only for a `command`"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    a__b: {command: [x]}\n", r"mcp\.servers: 'a__b': a label is"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    files_: {command: [x]}\n", r"'files_': a label is"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    '9x': {command: [x]}\n", r"'9x': a label is"),
        ("mcp:\n  api_keys: [k]\n  servers:\n    f: {command: [x], timeout_s: 0}\n", r"mcp\.servers\.f\.timeout_s"),
        ("mcp:\n  allowed_origins: ['http://a/path']\n", r"mcp\.allowed_origins: .*scheme://host"),
        ("mcp:\n  api_keys: [k]\n  sever: {}\n", r"mcp\.sever: unknown key"),
    ],
)
def test_bad_mcp_config_is_refused_naming_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, text))


def test_an_unset_variable_in_server_headers_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_TOKEN", raising=False)
    text = "mcp:\n  api_keys: [k]\n  servers:\n    t:\n      url: http://h\n      headers: {X: '${NOPE_TOKEN}'}\n"
    with pytest.raises(ConfigError, match=r"mcp\.servers\.t\.headers\.X: environment variable NOPE_TOKEN"):
        load_settings(write(tmp_path, text))


def test_exposed_names_show_their_server_and_split_back():
    assert exposed_name("files", "write_file") == "files__write_file"
    assert rule_name("files", "write_file") == "files.write_file"
    assert split_exposed("files__write_file") == ("files", "write_file")
    # a tool whose own name has `__` or starts with `_` still splits at the label's end
    assert split_exposed("files___private__x") == ("files", "_private__x")
    assert split_exposed("github_enterprise__list_repos") == ("github_enterprise", "list_repos")
    for bad in ("write_file", "__x", "files__", "files.write_file"):
        assert split_exposed(bad) is None


def test_a_tool_that_cannot_be_a_function_name_is_not_offered():
    assert unusable("files", "write_file") is None
    assert "not a valid function name" in (unusable("files", "write.file") or "")
    assert "not a valid function name" in (unusable("files", "x" * 60) or "")
    assert "not a valid function name" in (unusable("files", "with space") or "")


def test_resource_and_prompt_rules_and_a_server_default_tier_load(tmp_path):
    settings = load_settings(
        write(
            tmp_path,
            """
mcp:
  api_keys: [k]
  servers:
    vault: {command: [vault-server], default_tier: medium}
  resources: {"vault.readme": small, "vault.secret_*": large}
  prompts: {"*": large}
""",
        )
    )
    assert settings.mcp.servers["vault"].default_tier == "medium"
    assert settings.mcp.resources == {"vault.readme": "small", "vault.secret_*": "large"}
    assert settings.mcp.prompts == {"*": "large"}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("mcp: {resources: {readme: small}}", "mcp.resources"),  # no server part
        ("mcp: {prompts: {vault.hello: huge}}", "mcp.prompts.vault.hello"),
        (
            "mcp: {api_keys: [k], servers: {vault: {command: [x], default_tier: tiny}}}",
            "mcp.servers.vault.default_tier",
        ),
    ],
)
def test_bad_resource_or_prompt_rules_are_refused_naming_the_key(tmp_path, text, where):
    with pytest.raises(ConfigError, match=where.replace(".", r"\.")):
        load_settings(write(tmp_path, text))
