"""Each check type of the DSL, passing and failing, and the lenient equality they share."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gatekeeper.suite.checks import CHECKS, Answer, ToolCall, lenient_equal, run_check
from gatekeeper.suite.loader import Check


def check(type_: str, value: Any = None, **fields: Any) -> Check:
    return Check(type=type_, value=value, **fields)


def text(content: str) -> Answer:
    return Answer(content=content)


def calls(*pairs: tuple[str, Any], content: str = "") -> Answer:
    """An answer with tool calls; dict arguments are JSON-encoded, strings are sent raw."""
    return Answer(
        content=content,
        tool_calls=tuple(
            ToolCall(id=f"call_{i}", name=name, arguments=args if isinstance(args, str) else json.dumps(args))
            for i, (name, args) in enumerate(pairs)
        ),
    )


def test_every_check_type_of_the_dsl_has_a_function():
    assert set(CHECKS) == set(Check.model_fields["type"].annotation.__args__)


# --- word_count / line_count ---


def test_word_count_counts_whitespace_tokens_with_a_letter_or_digit():
    assert run_check(check("word_count", 5), text('"Hello, world" — it is 42!'))


def test_word_count_fails_on_a_different_count():
    assert not run_check(check("word_count", 3), text("one two three four"))


def test_word_count_ignores_punctuation_only_tokens():
    assert run_check(check("word_count", 2), text("yes - * no ..."))


def test_line_count_counts_non_blank_lines():
    assert run_check(check("line_count", 3), text("red\n\n  \ngreen\nblue\n"))


def test_line_count_fails_on_a_different_count():
    assert not run_check(check("line_count", 2), text("red\ngreen\nblue"))


# --- first_word / last_word ---


def test_first_word_strips_edge_punctuation():
    assert run_check(check("first_word", "Il"), text('  "**Il** cielo è blu.'))


def test_first_word_is_case_sensitive():
    assert not run_check(check("first_word", "Il"), text("il cielo"))


def test_first_word_fails_on_empty_answer():
    assert not run_check(check("first_word", "Il"), text("   "))


def test_first_word_compares_the_expected_value_as_written():
    # As the seed: String(value), never stripped; a number is written the JavaScript way.
    assert not run_check(check("first_word", " The "), text("The end"))
    assert run_check(check("first_word", 3.0), text("3 little pigs"))


def test_last_word_strips_edge_punctuation():
    assert run_check(check("last_word", "blu"), text("Il mare è blu!*\n"))


def test_last_word_skips_a_trailing_punctuation_token():
    assert run_check(check("last_word", "river"), text("down the river ."))


def test_last_word_fails_on_a_different_word():
    assert not run_check(check("last_word", "blu"), text("Il mare è verde."))


# --- contains / not_contains ---


def test_contains_is_case_insensitive_by_default():
    assert run_check(check("contains", "BLUE"), text("the sky is blue"))


def test_contains_fails_when_absent():
    assert not run_check(check("contains", "green"), text("the sky is blue"))


def test_contains_is_case_sensitive_when_flags_lack_i():
    assert not run_check(check("contains", "BLUE", flags=""), text("the sky is blue"))


def test_contains_stays_case_insensitive_with_flag_i():
    assert run_check(check("contains", "BLUE", flags="i"), text("the sky is blue"))


def test_not_contains_passes_when_absent():
    assert run_check(check("not_contains", "rosso"), text("verde\ngiallo"))


def test_not_contains_fails_whatever_the_case():
    assert not run_check(check("not_contains", "rosso"), text("Rosso\nverde"))


# --- regex / not_regex ---


def test_regex_searches_anywhere():
    assert run_check(check("regex", r"\b42\b"), text("the answer is 42."))


def test_regex_is_case_sensitive_by_default():
    assert not run_check(check("regex", "hello"), text("HELLO"))


def test_regex_uses_flag_i():
    assert run_check(check("regex", "hello", flags="i"), text("HELLO"))


def test_regex_uses_flag_m_for_line_anchors():
    assert run_check(check("regex", r"^42$", flags="m"), text("START\n42\nEND"))


def test_regex_ignores_flags_g_and_u():
    assert run_check(check("regex", "a+", flags="gu"), text("baa"))


def test_not_regex_passes_without_a_match():
    assert run_check(check("not_regex", "[A-Z]"), text("all lowercase"))


def test_not_regex_fails_on_a_match():
    assert not run_check(check("not_regex", r"^\s*[-*]", flags="m"), text("red\n- green"))


# --- not_empty ---


def test_not_empty_passes_on_text():
    assert run_check(check("not_empty"), text("ok"))


def test_not_empty_fails_on_blank_text():
    assert not run_check(check("not_empty"), text(" \n\t"))


# --- json_* ---


def test_json_valid_passes_on_repaired_json():
    assert run_check(check("json_valid"), text('Here: ```json\n{"a": [1, 2,],}\n```'))


def test_json_valid_fails_without_json():
    assert not run_check(check("json_valid"), text("I cannot do that."))


def test_json_path_equals_follows_keys_and_indexes():
    answer = text('{"items": [{"name": "pen"}, {"name": "ink"}]}')
    assert run_check(check("json_path_equals", "ink", path="items[1].name"), answer)


def test_json_path_equals_reads_nested_indexes():
    assert run_check(check("json_path_equals", 6, path="a.b[1][2]"), text('{"a": {"b": [[1], [4, 5, 6]]}}'))


def test_json_path_equals_reads_a_root_array():
    assert run_check(check("json_path_equals", "y", path="[1].x"), text('[{"x": "z"}, {"x": "y"}]'))


def test_json_path_equals_fails_on_a_different_value():
    assert not run_check(check("json_path_equals", 56, path="total"), text('{"total": 55}'))


def test_json_path_equals_fails_on_a_missing_path():
    assert not run_check(check("json_path_equals", "x", path="items[5].name"), text('{"items": []}'))


def test_json_path_equals_fails_when_indexing_a_non_array():
    assert not run_check(check("json_path_equals", "x", path="a[0]"), text('{"a": "xyz"}'))


def test_json_path_equals_fails_without_json():
    assert not run_check(check("json_path_equals", 1, path="a"), text("a = 1"))


def test_json_path_equals_accepts_a_dotted_index_like_javascript():
    assert run_check(check("json_path_equals", 2, path="a.1"), text('{"a": [1, 2]}'))


@pytest.mark.parametrize(
    ("json_type", "literal"),
    [
        ("string", '"x"'),
        ("number", "1.5"),
        ("number", "2"),
        ("integer", "2"),
        ("boolean", "false"),
        ("array", "[]"),
        ("object", "{}"),
        ("null", "null"),
    ],
)
def test_json_path_type_passes_on_its_type(json_type: str, literal: str):
    assert run_check(check("json_path_type", json_type, path="v"), text(f'{{"v": {literal}}}'))


@pytest.mark.parametrize(
    ("json_type", "literal"),
    [
        ("number", '"3"'),
        ("number", "true"),
        ("integer", "true"),
        ("integer", "2.0"),
        ("string", "3"),
        ("array", "{}"),
        ("object", "null"),
        ("null", '""'),
    ],
)
def test_json_path_type_fails_on_another_type(json_type: str, literal: str):
    assert not run_check(check("json_path_type", json_type, path="v"), text(f'{{"v": {literal}}}'))


def test_json_path_type_fails_on_a_missing_path():
    assert not run_check(check("json_path_type", "null", path="v"), text("{}"))


def test_json_path_length_counts_an_array():
    assert run_check(check("json_path_length", 3, path="xs"), text('{"xs": [1, 2, 3]}'))


def test_json_path_length_is_an_array_length_only_an_object_or_a_string_fails():
    # The seed: "array length". Counting an object's keys or a string's characters credited
    # a wrong shape (issue 16).
    answer = text('{"o": {"a": 1, "b": 2}, "s": "abc"}')
    assert not run_check(check("json_path_length", 2, path="o"), answer)
    assert not run_check(check("json_path_length", 3, path="s"), answer)


def test_json_path_length_fails_on_a_different_length():
    assert not run_check(check("json_path_length", 2, path="xs"), text('{"xs": [1, 2, 3]}'))


def test_json_path_length_fails_on_a_number():
    assert not run_check(check("json_path_length", 1, path="n"), text('{"n": 1}'))


# --- tool_called / tool_not_called ---


def test_tool_called_passes_on_the_first_call_name():
    assert run_check(check("tool_called", "find_user"), calls(("find_user", {}), ("get_orders", {})))


def test_tool_called_looks_only_at_the_first_call():
    assert not run_check(check("tool_called", "get_orders"), calls(("find_user", {}), ("get_orders", {})))


def test_tool_called_fails_without_a_call():
    assert not run_check(check("tool_called", "find_user"), text("I would call find_user."))


def test_tool_not_called_without_value_passes_when_no_tool_is_called():
    assert run_check(check("tool_not_called"), text("get_weather returns the weather."))


def test_tool_not_called_without_value_fails_on_any_call():
    assert not run_check(check("tool_not_called"), calls(("list_files", {})))


def test_tool_not_called_with_value_passes_when_only_other_tools_are_called():
    assert run_check(check("tool_not_called", "search_web"), calls(("search_files", {"query": "x"})))


def test_tool_not_called_with_value_fails_when_any_call_has_that_name():
    assert not run_check(check("tool_not_called", "search_web"), calls(("search_files", {}), ("search_web", {})))


# --- tool_arg_equals / tool_arg_regex ---


def test_tool_arg_equals_reads_the_first_call():
    answer = calls(("get_orders", {"user_id": "USR-7431"}), ("get_orders", {"user_id": "USR-2209"}))
    assert run_check(check("tool_arg_equals", "USR-7431", arg="user_id"), answer)


def test_tool_arg_equals_fails_on_a_distractor():
    answer = calls(("get_orders", {"user_id": "USR-8817"}))
    assert not run_check(check("tool_arg_equals", "USR-7431", arg="user_id"), answer)


def test_tool_arg_equals_compares_an_exact_string_with_quotes_and_newline():
    answer = calls(("save_note", {"body": 'say "hello"\ndone'}))
    assert run_check(check("tool_arg_equals", 'say "hello"\ndone', arg="body"), answer)


def test_tool_arg_equals_fails_on_a_double_escaped_newline():
    answer = calls(("save_note", {"body": 'say "hello"\\ndone'}))
    assert not run_check(check("tool_arg_equals", 'say "hello"\ndone', arg="body"), answer)


def test_tool_arg_equals_fails_on_an_integer_sent_as_a_string():
    assert not run_check(check("tool_arg_equals", 5, arg="replicas"), calls(("scale", {"replicas": "5"})))


def test_tool_arg_equals_accepts_a_boolean_sent_as_a_string():
    assert run_check(check("tool_arg_equals", True, arg="append"), calls(("write_file", {"append": "true"})))


def test_tool_arg_equals_fails_on_a_missing_argument():
    assert not run_check(check("tool_arg_equals", True, arg="append"), calls(("write_file", {"path": "a"})))


def test_tool_arg_equals_fails_on_unparseable_arguments():
    assert not run_check(check("tool_arg_equals", "a", arg="path"), calls(("write_file", '{"path": "a"')))


def test_tool_arg_equals_fails_when_arguments_are_not_an_object():
    assert not run_check(check("tool_arg_equals", "a", arg="path"), calls(("write_file", '["a"]')))


def test_tool_arg_equals_fails_without_a_call():
    assert not run_check(check("tool_arg_equals", "a", arg="path"), text('{"path": "a"}'))


def test_tool_arg_regex_is_case_insensitive_by_default():
    answer = calls(("find_user", {"name": "MARIA Rossi"}))
    assert run_check(check("tool_arg_regex", r"maria\s+rossi", arg="name"), answer)


def test_tool_arg_regex_is_case_sensitive_with_empty_flags():
    answer = calls(("find_user", {"name": "MARIA Rossi"}))
    assert not run_check(check("tool_arg_regex", r"maria\s+rossi", arg="name", flags=""), answer)


def test_tool_arg_regex_matches_the_text_form_of_a_non_string():
    assert run_check(check("tool_arg_regex", "^8080$", arg="port"), calls(("open_port", {"port": 8080})))


def test_tool_arg_regex_reads_a_null_argument_as_the_seed_does_as_empty():
    answer = calls(("write_file", {"content": None}))
    assert run_check(check("tool_arg_regex", "^$", arg="content"), answer)
    assert not run_check(check("tool_arg_regex", "null", arg="content"), answer)


def test_tool_arg_regex_fails_when_arguments_are_valid_json_but_not_an_object():
    # The seed reads every argument of such a call as missing (""); a runtime cannot run it.
    assert not run_check(check("tool_arg_regex", "^$", arg="path"), calls(("write_file", '"a"')))


def test_tool_arg_regex_fails_without_a_match():
    assert not run_check(check("tool_arg_regex", "ready", arg="content"), calls(("write_file", {"content": "boot"})))


# --- tool_call_count / tool_calls_include (parallel calls: every call of the answer) ---


def test_tool_call_count_counts_every_structured_call():
    answer = calls(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}))
    assert run_check(check("tool_call_count", 2), answer)


def test_tool_call_count_fails_on_one_call_too_few():
    assert not run_check(check("tool_call_count", 2), calls(("get_weather", {"city": "Oslo"})))


def test_tool_call_count_does_not_count_a_call_written_as_text():
    assert not run_check(check("tool_call_count", 1), text('{"name": "get_weather", "arguments": {"city": "Oslo"}}'))
    assert run_check(check("tool_call_count", 0), text("get_weather(Oslo)"))


def test_tool_calls_include_finds_a_call_after_the_first():
    answer = calls(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"}))
    assert run_check(check("tool_calls_include", {"name": "get_weather", "arguments": {"city": "Rome"}}), answer)


def test_tool_calls_include_without_arguments_needs_only_the_name():
    answer = calls(("get_forecast", {"city": "Oslo"}), ("get_weather", {}))
    assert run_check(check("tool_calls_include", {"name": "get_weather"}), answer)
    assert not run_check(check("tool_calls_include", {"name": "get_time"}), answer)


def test_tool_calls_include_needs_the_argument_on_a_call_of_that_tool():
    # Rome is asked for, but of another tool: the forecast is not the weather.
    answer = calls(("get_weather", {"city": "Oslo"}), ("get_forecast", {"city": "Rome", "days": 1}))
    assert not run_check(check("tool_calls_include", {"name": "get_weather", "arguments": {"city": "Rome"}}), answer)


def test_tool_calls_include_fails_when_both_calls_name_the_same_city():
    answer = calls(("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Oslo"}))
    assert not run_check(check("tool_calls_include", {"name": "get_weather", "arguments": {"city": "Rome"}}), answer)


def test_tool_calls_include_needs_every_listed_argument_and_allows_more():
    expected = {"name": "scale", "arguments": {"service": "web", "replicas": 3}}
    assert run_check(check("tool_calls_include", expected), calls(("scale", {"service": "web", "replicas": 3, "x": 1})))
    assert not run_check(check("tool_calls_include", expected), calls(("scale", {"service": "web"})))


def test_tool_calls_include_compares_arguments_as_tool_arg_equals_does():
    expected = {"name": "scale", "arguments": {"replicas": 3}}
    assert not run_check(check("tool_calls_include", expected), calls(("scale", {"replicas": "3"})))
    assert not run_check(check("tool_calls_include", expected), calls(("scale", '{"replicas": 3')))
    assert not run_check(check("tool_calls_include", {"name": "get_weather"}), calls(("get_weather", "[]")))


def test_tool_calls_include_fails_without_a_call():
    assert not run_check(check("tool_calls_include", {"name": "get_weather"}), text("get_weather(city=Oslo)"))


# --- lenient_equal ---


def test_lenient_equal_compares_numbers_numerically():
    assert lenient_equal(1.0, 1)
    assert lenient_equal(14.2, 14.2)


def test_lenient_equal_rejects_a_numeric_string_for_a_number():
    assert not lenient_equal("8080", 8080)


def test_lenient_equal_rejects_a_bool_for_a_number():
    assert not lenient_equal(True, 1)


def test_lenient_equal_matches_a_bool_and_its_string_form():
    assert lenient_equal("true", True)
    assert lenient_equal(False, "false")


def test_lenient_equal_matches_null_and_its_string_form():
    assert lenient_equal(None, "null")


def test_lenient_equal_matches_a_number_against_its_string_form():
    assert lenient_equal(8080, "8080")


def test_lenient_equal_compares_strings_exactly():
    # As the seed's String(a) === String(b): no stripping, case kept.
    assert not lenient_equal("  server.log\n", "server.log")
    assert not lenient_equal("Server.log", "server.log")
    assert lenient_equal(3.0, "3") and lenient_equal(True, "true") and lenient_equal(1e21, "1e+21")


def test_the_answer_is_trimmed_before_every_check_as_in_the_seed():
    assert run_check(check("regex", "^Paris$"), text("  Paris\n"))
    assert run_check(check("line_count", 2), text("a\rb\nc"))  # "\r" alone ends no line
    assert not run_check(check("not_empty"), text("\ufeff \u00a0"))  # JavaScript whitespace


def test_a_missing_argument_is_matched_as_empty_text_as_in_the_seed():
    assert run_check(check("tool_arg_regex", "^$", arg="mode"), calls(("w", {"path": "a"})))
    assert not run_check(check("tool_arg_regex", "^$", arg="mode"), text("no call"))


def test_lenient_equal_compares_containers_as_compact_json_ignoring_key_order():
    assert lenient_equal({"b": [1, 2], "a": True}, {"a": True, "b": [1, 2]})
    assert lenient_equal([1, "x"], '[1,"x"]')
    assert not lenient_equal([1, 2], [2, 1])


# --- where gatekeeper used to be wrong by the seed's own words (issue 16) ---


@pytest.mark.parametrize(
    "content", ['{"total": NaN}', '{"total": Infinity}', '{"total": -Infinity}', "NaN", '```json\n{"total": NaN}\n```']
)
def test_nan_and_infinity_are_not_json(content):
    assert not run_check(check("json_valid"), text(content))
    assert not run_check(check("json_path_type", "number", path="total"), text(content))


@pytest.mark.parametrize("arguments", ['{"replicas": NaN}', '{"replicas": Infinity}', '{"replicas": -Infinity}'])
def test_tool_arguments_holding_nan_or_infinity_fail_argument_checks(arguments):
    answer = calls(("scale", arguments))
    assert not run_check(check("tool_arg_regex", ".*", arg="replicas"), answer)
    assert not run_check(check("tool_arg_equals", "NaN", arg="replicas"), answer)
    assert run_check(check("tool_called", "scale"), answer)  # the call itself was made


@pytest.mark.parametrize(
    "content",
    [
        "{'tags': [], 'count': 3}",  # single quotes
        '{"tags": [], "ok": True}',  # a Python literal
        '{\n  // the tags\n  "tags": [],\n  "count": 3\n}',  # a comment
        "{tags: [], count: 3}",  # unquoted keys
        "Here you go: {'items': [{\"a\": 1}]}",  # a valid object inside an invalid one
    ],
)
def test_a_malformed_top_level_value_is_not_rescued_by_a_valid_fragment_inside_it(content):
    assert not run_check(check("json_valid"), text(content))
    assert not run_check(check("json_path_length", 0, path="tags"), text(content))


def test_a_valid_value_after_a_malformed_one_is_still_found():
    # Prose that holds a malformed value, then the answer: the search resumes after the first.
    assert run_check(check("json_valid"), text("Not {'this': 1} but this: {\"count\": 3}"))


def test_tool_arguments_compare_as_sent_a_trailing_newline_is_another_file():
    assert not run_check(check("tool_arg_equals", "server.log", arg="path"), calls(("w", {"path": "server.log\n"})))
    assert not run_check(check("tool_arg_equals", "server.log", arg="path"), calls(("w", {"path": " server.log"})))
    assert run_check(check("tool_arg_equals", "server.log", arg="path"), calls(("w", {"path": "server.log"})))


def test_tool_arg_regex_sees_the_argument_as_sent():
    answer = calls(("w", {"path": "server.log\n"}))
    assert not run_check(check("tool_arg_regex", r"^server\.log\Z", arg="path"), answer)
