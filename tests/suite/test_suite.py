"""The suite loader (validation errors name the file and the fault), the suite hash, and the
scripted answers: a perfect model passes every check of every suite we ship or read."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from answers import fenced_json, no_tool_calls, perfect, string_integer, wrong_distractor
from conftest import SEED_SUITE, needs_seed_suite

from gatekeeper.errors import SuiteError
from gatekeeper.suite.checks import Answer, ToolCall, run_check
from gatekeeper.suite.loader import BenchTest, load_suite, suite_hash

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SUITE = ROOT / "benchmarks"
FIXTURE_SUITE = Path(__file__).resolve().parents[1] / "fixtures" / "seed_format_suite"

VALID: dict[str, Any] = {
    "name": "t",
    "category": "instruction",
    "prompt": "Say hi.",
    "checks": [{"type": "contains", "value": "hi"}],
}


def write(directory: Path, name: str, data: Any) -> Path:
    path = directory / name
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def load_error(tmp_path: Path, data: Any, name: str = "10_bad.json") -> str:
    write(tmp_path, name, data)
    with pytest.raises(SuiteError) as info:
        load_suite(tmp_path)
    return str(info.value)


# --- loading ---


def test_valid_short_form_loads(tmp_path: Path):
    write(tmp_path, "10_ok.json", VALID)
    suite = load_suite(tmp_path)
    assert [t.name for t in suite.tests] == ["t"]
    assert suite.tests[0].all_steps[0].prompt == "Say hi."


def test_unknown_check_type_names_the_file_and_the_type(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "checks": [{"type": "word_cont", "value": 3}]})
    assert "10_bad.json" in message and "checks.0.type" in message and "word_cont" in message


def test_missing_prompt_names_the_file_and_the_prompt(tmp_path: Path):
    data = {k: v for k, v in VALID.items() if k != "prompt"}
    message = load_error(tmp_path, data)
    assert "10_bad.json" in message and "missing 'prompt'" in message


def test_bad_category_names_the_file_and_the_value(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "category": "tools"})
    assert "10_bad.json" in message and "category" in message and "'tools'" in message


def test_a_test_without_checks_or_an_infinite_weight_is_refused(tmp_path: Path):
    # Either would store a score that says nothing: 0 whatever the answer, or NaN.
    assert "checks" in load_error(tmp_path, {**VALID, "checks": []})
    assert "weight" in load_error(tmp_path, {**VALID, "weight": 1e400})  # written as Infinity


def test_malformed_json_names_the_file(tmp_path: Path):
    message = load_error(tmp_path, '{"name": "t",')
    assert "10_bad.json" in message and "malformed JSON" in message


def test_check_missing_its_value_names_the_file_and_the_check(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "checks": [{"type": "word_count"}]})
    assert "10_bad.json" in message and "checks.0" in message and "needs a 'value'" in message


def test_unknown_key_names_the_file_and_the_key(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "timeout": 3})
    assert "10_bad.json" in message and "timeout: unknown key" in message


def test_python_field_name_tool_result_is_an_unknown_key_in_a_file(tmp_path: Path):
    data = {
        **{k: v for k, v in VALID.items() if k not in ("prompt", "checks")},
        "steps": [
            {"prompt": "go", "checks": []},
            {"tool_result": "ok", "checks": []},
        ],
    }
    message = load_error(tmp_path, data)
    assert "10_bad.json" in message and "tool_result: unknown key" in message


def test_malformed_json_path_names_the_file_and_the_path(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "checks": [{"type": "json_path_equals", "path": "a..b", "value": 1}]})
    assert "10_bad.json" in message and "bad path 'a..b'" in message


def test_unknown_json_type_names_the_file_and_the_type(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "checks": [{"type": "json_path_type", "path": "a", "value": "float"}]})
    assert "10_bad.json" in message and "'float'" in message


@pytest.mark.parametrize(
    ("check", "expected"),
    [
        ({"type": "tool_call_count"}, "check 'tool_call_count' needs a 'value'"),
        ({"type": "tool_call_count", "value": "2"}, "check 'tool_call_count' needs an integer 'value', got '2'"),
        ({"type": "tool_call_count", "value": -1}, "check 'tool_call_count' needs a 'value' >= 0, got -1"),
        ({"type": "tool_calls_include"}, "check 'tool_calls_include' needs a 'value'"),
        ({"type": "tool_calls_include", "value": "get_weather"}, "needs a 'value' object {\"name\": TOOL"),
        ({"type": "tool_calls_include", "value": {"arguments": {"city": "Oslo"}}}, "needs a tool 'name'"),
        ({"type": "tool_calls_include", "value": {"name": "f", "args": {}}}, "unknown key 'args' in 'value'"),
        (
            {"type": "tool_calls_include", "value": {"name": "f", "arguments": ["Oslo"]}},
            "'arguments' must be an object",
        ),
    ],
    ids=[
        "count without value",
        "count as text",
        "negative count",
        "include without value",
        "include a bare name",
        "include without name",
        "include unknown key",
        "include arguments not an object",
    ],
)
def test_a_malformed_parallel_call_check_names_the_file_the_check_and_the_fault(
    tmp_path: Path, check: dict, expected: str
):
    message = load_error(tmp_path, {**VALID, "category": "toolCalling", "checks": [check]})
    assert "10_bad.json" in message and "checks.0" in message and expected in message


def test_tool_without_function_object_is_a_suite_error(tmp_path: Path):
    message = load_error(tmp_path, {**VALID, "tools": [{"type": "function", "function": "get_weather"}]})
    assert "10_bad.json" in message and "tools[0]" in message


def test_duplicate_test_name_names_both_files(tmp_path: Path):
    write(tmp_path, "10_a.json", VALID)
    message = load_error(tmp_path, VALID, name="11_b.json")
    assert "11_b.json" in message and "10_a.json" in message


# --- hash ---


def test_suite_hash_is_md5_of_names_and_bytes_in_name_order(tmp_path: Path):
    write(tmp_path, "20_b.json", {**VALID, "name": "b"})
    write(tmp_path, "10_a.json", {**VALID, "name": "a"})
    digest = hashlib.md5()
    for name in ("10_a.json", "20_b.json"):
        digest.update(name.encode() + (tmp_path / name).read_bytes())
    assert suite_hash(tmp_path) == digest.hexdigest()[:8]


def test_suite_hash_is_stable_across_directories(tmp_path: Path):
    for directory in (tmp_path / "one", tmp_path / "two"):
        directory.mkdir()
        write(directory, "10_a.json", VALID)
    assert suite_hash(tmp_path / "one") == suite_hash(tmp_path / "two")
    assert load_suite(tmp_path / "one").hash == suite_hash(tmp_path / "one")


def test_suite_hash_changes_when_a_file_changes(tmp_path: Path):
    write(tmp_path, "10_a.json", VALID)
    before = suite_hash(tmp_path)
    write(tmp_path, "10_a.json", {**VALID, "prompt": "Say hello."})
    assert suite_hash(tmp_path) != before


def test_suite_hash_changes_when_a_file_is_renamed(tmp_path: Path):
    path = write(tmp_path, "10_a.json", VALID)
    before = suite_hash(tmp_path)
    path.rename(tmp_path / "11_a.json")
    assert suite_hash(tmp_path) != before


def test_suite_hash_ignores_files_that_are_not_json(tmp_path: Path):
    write(tmp_path, "10_a.json", VALID)
    before = suite_hash(tmp_path)
    write(tmp_path, "README.md", "notes")
    assert suite_hash(tmp_path) == before


# --- the suites we ship or read ---


@needs_seed_suite
def test_seed_suite_loads():
    suite = load_suite(SEED_SUITE)
    assert len(suite.tests) == 7
    assert {t.category for t in suite.tests} == {"instruction", "json", "toolCalling"}


def test_fixture_suite_in_seed_format_loads():
    assert len(load_suite(FIXTURE_SUITE).tests) == 4


def test_default_suite_covers_every_category_at_least_three_times():
    suite = load_suite(DEFAULT_SUITE)
    assert all(len(suite.by_category(c)) >= 3 for c in ("instruction", "json", "toolCalling"))
    assert all(t.description for t in suite.tests)


def _all_tests() -> list[BenchTest]:
    suites = (DEFAULT_SUITE, SEED_SUITE, FIXTURE_SUITE) if SEED_SUITE.is_dir() else (DEFAULT_SUITE, FIXTURE_SUITE)
    return [t for d in suites for t in load_suite(d).tests]


def answer_of(message: dict[str, Any]) -> Answer:
    """The Answer a backend would build from a scripted message (arguments as raw JSON)."""
    calls = tuple(
        ToolCall(id=f"call_{i}", name=c["name"], arguments=json.dumps(c["arguments"]))
        for i, c in enumerate(message["tool_calls"])
    )
    return Answer(content=message["content"] or "", tool_calls=calls)


def failed_checks(test: BenchTest, behaviour) -> list[tuple[int, str, str | None]]:
    failed = []
    for i, step in enumerate(test.all_steps):
        answer = answer_of(behaviour(test, i))
        failed += [(i, c.type, c.arg or c.path) for c in step.checks if not run_check(c, answer)]
    return failed


@pytest.mark.parametrize("test", _all_tests(), ids=lambda t: t.name)
def test_perfect_model_passes_every_check(test: BenchTest):
    assert failed_checks(test, perfect) == []


@pytest.mark.parametrize("test", _all_tests(), ids=lambda t: t.name)
def test_fenced_json_still_passes_every_check(test: BenchTest):
    assert failed_checks(test, fenced_json) == []


def test_fenced_json_really_wraps_json_answers_in_a_fence():
    test = next(t for t in load_suite(DEFAULT_SUITE).tests if t.category == "json")
    assert "```json" in fenced_json(test, 0)["content"]


def test_no_tool_calls_fails_every_tool_called_check():
    for test in load_suite(DEFAULT_SUITE).by_category("toolCalling"):
        for i, step in enumerate(test.all_steps):
            message = no_tool_calls(test, i)
            assert message["tool_calls"] == []
            answer = answer_of(message)
            assert not any(run_check(c, answer) for c in step.checks if c.type == "tool_called")


def test_no_tool_calls_keeps_perfect_answers_without_tools():
    for test in load_suite(DEFAULT_SUITE).tests:
        if test.category != "toolCalling":
            assert no_tool_calls(test, 0) == perfect(test, 0)


@pytest.mark.parametrize("name", ["tool_chain_distractor_ids"])
def test_wrong_distractor_fails_only_the_carried_id(name: str):
    test = next(t for t in load_suite(DEFAULT_SUITE).tests if t.name == name)
    assert failed_checks(test, wrong_distractor) == [(1, "tool_arg_equals", "customer_id")]


@needs_seed_suite
def test_wrong_distractor_fails_the_seed_chain_too():
    test = next(t for t in load_suite(SEED_SUITE).tests if t.name == "catena_tool_distrattori")
    assert failed_checks(test, wrong_distractor) == [(1, "tool_arg_equals", "user_id")]


def test_string_integer_fails_only_the_integer_argument():
    test = next(t for t in load_suite(DEFAULT_SUITE).tests if t.name == "integer_argument")
    assert failed_checks(test, string_integer) == [(0, "tool_arg_equals", "replicas")]


def test_perfect_has_no_answer_for_an_unknown_test():
    with pytest.raises(KeyError, match="no scripted answer"):
        perfect(BenchTest.model_validate({**VALID, "name": "unknown"}), 0)


# --- randomised tests: `vars` (issue 16) ---

RANDOM: dict[str, Any] = {
    "name": "r",
    "category": "json",
    "vars": {
        "item": {"choice": ["bolts", "nuts", "rivets"]},
        "n": {"int": [2, 99]},
        "id": {"id": "CUS-####?"},
        "w": {"word": [5, 7]},
    },
    "prompt": "Item {{item}} ({{id}}) has {{n}} units, word {{w}}. Reply with JSON: total = n + 3.",
    "checks": [
        {"type": "json_path_equals", "path": "total", "value": "{{n + 3}}"},
        {"type": "json_path_equals", "path": "label", "value": "{{item}}-{{n * 2}}"},
        {"type": "contains", "value": "{{w}}"},
        {"type": "regex", "value": "{{id}}"},
    ],
}


def random_suite(tmp_path: Path, data: dict[str, Any] = RANDOM):
    write(tmp_path, "10_r.json", data)
    return load_suite(tmp_path)


def test_the_same_seed_draws_the_same_instance(tmp_path: Path):
    suite = random_suite(tmp_path)
    assert suite.randomised
    assert suite.instance(42) == suite.instance(42)
    assert suite.instance(42)[0].bindings == suite.instance(42)[0].bindings


def test_different_seeds_and_samples_draw_different_instances(tmp_path: Path):
    suite = random_suite(tmp_path)
    prompts = {suite.instance(seed, sample)[0].prompt for seed in range(10) for sample in range(3)}
    assert len(prompts) > 20


def test_placeholders_render_in_prompts_and_check_values_with_arithmetic(tmp_path: Path):
    (test,) = random_suite(tmp_path).instance(7)
    v = test.bindings
    assert (
        test.prompt
        == f"Item {v['item']} ({v['id']}) has {v['n']} units, word {v['w']}. Reply with JSON: total = n + 3."
    )
    total, label, contains, regex = test.checks
    assert total.value == v["n"] + 3 and isinstance(total.value, int)  # a whole placeholder keeps its type
    assert label.value == f"{v['item']}-{v['n'] * 2}"  # inside a longer string it is text
    assert contains.value == v["w"] and v["w"].isalpha() and 5 <= len(v["w"]) <= 7
    assert regex.value.startswith("CUS-") and regex.value[4:8].isdigit() and regex.value[8].isupper()


def test_string_variables_of_a_file_never_repeat_a_value(tmp_path: Path):
    data = {
        **RANDOM,
        "vars": {"a": {"choice": ["x", "y"]}, "b": {"choice": ["x", "y"]}},
        "prompt": "{{a}} {{b}}",
        "checks": [{"type": "contains", "value": "{{a}}"}],
    }
    suite = random_suite(tmp_path, data)
    assert all(t.bindings["a"] != t.bindings["b"] for seed in range(20) for t in suite.instance(seed))


def test_the_hash_covers_the_file_as_written_not_the_instance(tmp_path: Path):
    suite = random_suite(tmp_path)
    assert suite.hash == suite_hash(tmp_path)
    assert load_suite(tmp_path).hash == suite.hash  # drawing instances changes nothing
    write(tmp_path, "10_r.json", {**RANDOM, "prompt": RANDOM["prompt"] + " "})
    assert load_suite(tmp_path).hash != suite.hash


@needs_seed_suite
def test_a_file_without_vars_is_the_same_test_at_every_seed():
    suite = load_suite(SEED_SUITE)
    assert not suite.randomised and suite.instance(1) == suite.instance(2) == suite.tests


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"prompt": "{{m}} units"}, "prompt: template '{{m}}' uses unknown variable 'm'"),
        ({"prompt": "{{item + 1}} {{n}} {{id}} {{w}}"}, "does arithmetic on variable 'item', which is not an integer"),
        ({"vars": {**RANDOM["vars"], "spare": {"int": [1, 2]}}}, "vars.spare: declared but never used"),
        ({"prompt": "{{n} {{item}} {{id}} {{w}}"}, "prompt: "),
        ({"prompt": "{{__import__('os')}} {{n}} {{item}} {{id}} {{w}}"}, "may only use variables, integers"),
        ({"vars": {**RANDOM["vars"], "n": {"int": [9, 2]}}}, "vars.n: 'int' range is empty"),
        ({"vars": {**RANDOM["vars"], "n": {"int": [1, 2], "word": [3, 4]}}}, "vars.n: give exactly one of"),
        ({"vars": {**RANDOM["vars"], "id": {"id": "CUS-0000"}}}, "vars.id: 'id' pattern 'CUS-0000' has no '#'"),
        ({"vars": []}, "vars: expected a non-empty object"),
    ],
)
def test_a_wrong_template_names_the_file_and_the_variable(tmp_path: Path, change: dict, expected: str):
    message = load_error(tmp_path, {**RANDOM, **change}, name="10_r.json")
    assert message.startswith(str(tmp_path / "10_r.json") + ": ")
    assert expected in message


def test_a_rendered_value_that_breaks_a_check_names_the_file_and_the_drawn_values(tmp_path: Path):
    data = {**RANDOM, "checks": [{"type": "word_count", "value": "{{w}}"}], "prompt": "{{n}} {{item}} {{id}} {{w}}"}
    message = load_error(tmp_path, data, name="10_r.json")
    assert "10_r.json: with vars" in message and "w=" in message and "integer 'value'" in message


def test_suite_validate_names_the_file_and_the_variable(tmp_path: Path):
    import subprocess
    import sys

    write(tmp_path, "10_r.json", {**RANDOM, "prompt": "{{count}} {{n}} {{item}} {{id}} {{w}}"})
    done = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "suite", "validate", str(tmp_path)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "10_r.json" in done.stderr and "unknown variable 'count'" in done.stderr


@pytest.mark.parametrize("seed", range(25))
def test_perfect_passes_every_instance_of_the_default_randomised_tests(seed: int):
    suite = load_suite(DEFAULT_SUITE)
    for test in suite.instance(seed, seed % 3):
        if test.name in suite.templates:
            assert failed_checks(test, perfect) == [], (test.name, test.bindings)


def test_wrong_distractor_fails_only_the_carried_id_of_the_random_chain():
    suite = load_suite(DEFAULT_SUITE)
    test = next(t for t in suite.instance(3) if t.name == "tool_chain_random_ids")
    assert failed_checks(test, wrong_distractor) == [(1, "tool_arg_equals", "customer_id")]


def test_the_default_suite_has_randomised_tests_in_every_category():
    suite = load_suite(DEFAULT_SUITE)
    assert {suite.templates and t.category for t in suite.tests if t.name in suite.templates} == {
        "instruction",
        "json",
        "toolCalling",
    }
