"""extract_json: the first JSON value of a model's answer, after the repairs small models need."""

from __future__ import annotations

import pytest

from gatekeeper.suite.jsonrepair import extract_json


def test_plain_object_is_returned():
    assert extract_json('{"a": 1, "b": [true, null]}') == {"a": 1, "b": [True, None]}


def test_markdown_fence_with_language_is_removed():
    assert extract_json('```json\n{"a": 1}\n```') == {"a": 1}


def test_markdown_fence_without_language_is_removed():
    assert extract_json("```\n[1, 2]\n```") == [1, 2]


def test_unclosed_fence_of_a_truncated_answer_is_repaired():
    assert extract_json('```json\n{"a": 1,\n') == {"a": 1}


def test_prose_before_and_after_is_ignored():
    assert extract_json('Sure! Here it is: {"ok": true} Let me know if you need more.') == {"ok": True}


def test_prose_with_a_bracket_before_the_json_is_skipped():
    assert extract_json('As noted [see above], the result: {"a": 1}') == {"a": 1}


def test_prose_with_an_unbalanced_bracket_before_the_json_is_skipped():
    assert extract_json('Result [draft: {"a": 1}') == {"a": 1}


def test_first_of_two_values_is_returned():
    assert extract_json('{"first": 1}\n{"second": 2}') == {"first": 1}


def test_braces_inside_strings_do_not_end_the_value():
    assert extract_json('{"code": "if (x) { y(); }", "n": 1} trailing } text') == {"code": "if (x) { y(); }", "n": 1}


def test_escaped_quotes_inside_strings_are_kept():
    assert extract_json('{"q": "say \\"hi\\" {"} done') == {"q": 'say "hi" {'}


def test_trailing_comma_in_object_is_removed():
    assert extract_json('{"a": 1, "b": 2,}') == {"a": 1, "b": 2}


def test_trailing_comma_in_array_is_removed():
    assert extract_json('{"xs": [1, 2, 3, ]\n}') == {"xs": [1, 2, 3]}


def test_comma_inside_a_string_before_a_brace_is_kept():
    assert extract_json('{"s": ",}"}') == {"s": ",}"}


def test_raw_newline_inside_a_string_is_escaped():
    assert extract_json('{"text": "line one\nline two"}') == {"text": "line one\nline two"}


def test_raw_tab_inside_a_string_is_escaped():
    assert extract_json('{"text": "a\tb"}') == {"text": "a\tb"}


def test_missing_closing_quote_at_the_end_is_added():
    assert extract_json('{"name": "orders-db') == {"name": "orders-db"}


def test_missing_closing_braces_and_brackets_at_the_end_are_added():
    assert extract_json('{"a": [1, {"b": 2') == {"a": [1, {"b": 2}]}


def test_missing_quote_and_brackets_together_are_added():
    assert extract_json('{"users": [{"name": "adm') == {"users": [{"name": "adm"}]}


def test_trailing_comma_before_the_truncation_is_removed():
    assert extract_json('{"a": 1,') == {"a": 1}


def test_dangling_backslash_at_the_truncation_is_dropped():
    assert extract_json('{"a": "x\\') == {"a": "x"}


def test_mismatched_closer_is_replaced_by_the_right_one():
    assert extract_json("[1, 2}") == [1, 2]


def test_bare_scalar_is_accepted_when_it_is_the_whole_text():
    assert extract_json(" 42\n") == 42
    assert extract_json('"ok"') == "ok"


def test_bare_scalar_inside_prose_is_not_json():
    with pytest.raises(ValueError):
        extract_json("The answer is 42.")


def test_empty_text_raises_with_a_reason():
    with pytest.raises(ValueError, match="empty"):
        extract_json("  ")


def test_text_without_json_raises_with_a_reason():
    with pytest.raises(ValueError, match="no JSON"):
        extract_json("I cannot help with that.")


def test_unrepairable_json_raises_with_a_reason():
    with pytest.raises(ValueError, match="offset 0"):
        extract_json('{"a": 1, "b"')


def test_lone_opening_brace_at_the_end_is_not_json():
    with pytest.raises(ValueError):
        extract_json("Here is the JSON: {")


def test_bracket_followed_by_prose_is_not_a_candidate():
    assert extract_json("Items [see list] and {x} then [1]") == [1]


def test_a_citation_before_the_object_is_read_past():
    assert extract_json('Note [1]: {"total": 56}') == {"total": 56}
    assert extract_json('Per [2, 3] the sum is {"total": 56} [4].') == {"total": 56}


def test_citations_and_bracketed_numbers_in_prose_are_no_json():
    for text in ("See [1].", "Sources [1][2] agree.", "Between [0, 10] and more.", "A [] list here"):
        with pytest.raises(ValueError):
            extract_json(text)


def test_a_list_of_numbers_that_ends_the_answer_is_the_answer():
    # As the seed reads it: the JSON runs from the first bracket to the end of the text.
    assert extract_json("The ids: [3, 5]") == [3, 5]
    assert extract_json("[1]") == [1]
