"""The pure part of live drift: classifying calls, the rolling window, the settings."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gatekeeper.drift.window import (
    Ceilings,
    DriftSettings,
    Fault,
    Figures,
    Observation,
    Window,
    classify,
    loosen,
    observe,
)
from gatekeeper.protocols.base import Call
from gatekeeper.rules.tiers import Tier

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"],
    "additionalProperties": False,
}
OFFERED = {"get_weather": WEATHER, "ping": None}


def call(name: str = "get_weather", arguments: str | None = '{"city": "Rome"}', offered: bool = True) -> Call:
    return Call(name, arguments, offered)


# -- classify ---------------------------------------------------------------------------------


def test_a_sound_call_has_no_fault() -> None:
    assert classify(call(arguments='{"city": "Rome", "days": 3}'), OFFERED) is None


def test_a_call_to_a_tool_not_offered_is_counted_whatever_its_arguments() -> None:
    assert classify(call("rm_rf", "{}", offered=False), OFFERED) is Fault.NOT_OFFERED
    # The codec's flag and the offered names must agree; either one saying "not offered" wins.
    assert classify(call("rm_rf", "{}", offered=True), OFFERED) is Fault.NOT_OFFERED


@pytest.mark.parametrize(
    "arguments",
    [
        '{"city": "Rome"',
        "city=Rome",
        '{"city": NaN}',
        '{"city": "x", "days": Infinity}',
        '{"days": -Infinity}',
        "[" * 100_000,
    ],
)
def test_arguments_that_are_not_json_are_invalid_json(arguments: str) -> None:
    assert classify(call(arguments=arguments), OFFERED) is Fault.INVALID_JSON


@pytest.mark.parametrize(
    "arguments",
    [
        '{"city": "Rome", "days": "5"}',
        '{"days": 5}',
        '{"city": 7}',
        '{"city": "Rome", "extra": 1}',
        '{"city": "Rome", "days": true}',
        '["Rome"]',
        '"Rome"',
    ],
)
def test_arguments_that_break_the_schema_are_invalid_args(arguments: str) -> None:
    assert classify(call(arguments=arguments), OFFERED) is Fault.INVALID_ARGS


def test_a_tool_without_a_schema_still_needs_an_object() -> None:
    assert classify(call("ping", '{"anything": 1}'), OFFERED) is None
    assert classify(call("ping", "3"), OFFERED) is Fault.INVALID_ARGS


def test_empty_arguments_mean_an_empty_object() -> None:
    assert classify(call("ping", ""), OFFERED) is None
    assert classify(call("get_weather", ""), OFFERED) is Fault.INVALID_ARGS  # city is required


def test_arguments_sent_as_objects_are_not_judged_as_text() -> None:
    assert classify(call(arguments=None), OFFERED) is None


def test_a_broken_client_schema_never_counts_against_the_model() -> None:
    offered = {"t": {"type": "no-such-type"}, "r": {"$ref": "https://example.invalid/schema.json"}}
    assert classify(call("t", '{"a": 1}'), offered) is None
    assert classify(call("r", '{"a": 1}'), offered) is None


def test_patterns_from_clients_are_not_run() -> None:
    # A catastrophic pattern: with Python's regex engine this would backtrack for ages.
    evil = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}}
    assert classify(call("e", '{"s": "' + "a" * 40 + '!"}'), {"e": evil}) is None
    assert classify(call("e", '{"s": 1}'), {"e": evil}) is Fault.INVALID_ARGS  # the type still counts


def test_loosen_only_removes_regular_expressions() -> None:
    schema = {
        "type": "object",
        "properties": {"pattern": {"type": "string", "pattern": "x+"}},
        "patternProperties": {"^x": {"type": "integer"}},
        "additionalProperties": False,
        "anyOf": [{"pattern": "y"}],
        "$defs": {"d": {"items": {"pattern": "z"}}},
    }
    assert loosen(schema) == {
        "type": "object",
        "properties": {"pattern": {"type": "string"}},
        "anyOf": [{}],
        "$defs": {"d": {"items": {}}},
    }


# -- the window -------------------------------------------------------------------------------


def obs(at: float, fault: Fault | None = None) -> Observation:
    return Observation(at, fault, "t", {})


def test_the_window_keeps_only_the_last_calls_by_count() -> None:
    window = Window(max_calls=3, max_age_s=1e9)
    for i, fault in enumerate([Fault.INVALID_JSON, None, Fault.INVALID_ARGS, None]):
        window.add(obs(i, fault))
    figures = window.figures(now=3)
    assert (figures.calls, figures.faults[Fault.INVALID_JSON], figures.faults[Fault.INVALID_ARGS]) == (3, 0, 1)


def test_the_window_forgets_calls_older_than_its_age() -> None:
    window = Window(max_calls=100, max_age_s=60)
    window.add(obs(0, Fault.NOT_OFFERED))
    window.add(obs(30))
    window.add(obs(50, Fault.NOT_OFFERED))
    assert window.figures(now=59).calls == 3
    figures = window.figures(now=61)
    assert (figures.calls, figures.faults[Fault.NOT_OFFERED], figures.span_s) == (2, 1, 31)
    assert window.figures(now=200) == Figures(0, {f: 0 for f in Fault}, 0.0)


def test_examples_are_the_newest_faulty_calls() -> None:
    window = Window(max_calls=10, max_age_s=1e9)
    for i in range(6):
        window.add(obs(i, Fault.INVALID_ARGS if i % 2 else None))
    assert [o.at for o in window.examples(2)] == [5, 3]


def test_a_faulty_calls_evidence_is_its_shape_and_its_values_only_when_asked_and_truncated() -> None:
    text = '{"city": ' + '"' + "x" * 500 + '", "extra": 1}'
    seen = observe(call(arguments=text), OFFERED, at=1.0)
    assert seen.fault is not None and seen.arguments is None
    assert seen.shape == {"type": "object", "chars": len(text), "keys": {"city": "string(500)", "extra": "integer"}}
    kept = observe(call(arguments=text), OFFERED, at=1.0, values=True)
    assert len(kept.arguments or "") == 121 and kept.example()["shape"] == seen.shape
    sound = observe(call(arguments='{"city": "Rome"}'), OFFERED, at=1.0, values=True)
    assert sound.fault is None and sound.arguments is None  # a sound call is never shown


# -- settings ---------------------------------------------------------------------------------


def test_a_config_changes_one_ceiling_and_keeps_the_other_defaults() -> None:
    settings = DriftSettings.model_validate({"ceilings": {"large": {"invalid_args": 0.05}}})
    assert settings.ceilings_for(Tier.LARGE) == Ceilings(not_offered=0.02, invalid_json=0.01, invalid_args=0.05)
    assert settings.ceilings_for(Tier.MEDIUM).invalid_args == 0.10


def test_a_window_too_short_to_end_a_demotion_is_refused() -> None:
    # A faultless run ends a `large` demotion (1% ceiling x 1.5, 99%) after 305 calls: fewer never can.
    with pytest.raises(ValidationError, match=r"window_calls 304 is fewer than the 305 faultless calls"):
        DriftSettings(window_calls=304)
    with pytest.raises(ValidationError, match=r"762 faultless calls"):
        DriftSettings(window_calls=700, confidence=0.99999)
    with pytest.raises(ValidationError, match=r"459 faultless calls"):
        DriftSettings(window_calls=458, restore_ratio=1)
    assert DriftSettings(window_calls=305).window_calls == 305


def test_a_restore_level_at_the_detected_rate_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"restore_ratio 3.0 must be below detect_ratio 3.0"):
        DriftSettings(restore_ratio=3)


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"ceilings": {"huge": {}}}, "ceilings.huge.[key]"),
        ({"ceilings": {"large": {"invalid_args": 2}}}, "ceilings.large.invalid_args"),
        ({"ceilings": {"large": {"typo": 0.1}}}, "ceilings.large.typo"),
        ({"window_calls": 0}, "window_calls"),
        ({"confidence": 1.0}, "confidence"),
        ({"ceilings": {"large": {"invalid_json": 0}}}, "ceilings.large.invalid_json"),
        ({"min_clients": 0}, "min_clients"),
        ({"client_header": "x user"}, "client_header"),
        ({"client_header": "Authorization"}, "client_header"),
        ({"detect_ratio": 1}, "detect_ratio"),
        ({"restore_ratio": 0.9}, "restore_ratio"),
        ({"min_calls": 50}, "min_calls"),
    ],
)
def test_bad_drift_settings_name_the_key(raw: dict, where: str) -> None:
    with pytest.raises(ValidationError) as info:
        DriftSettings.model_validate(raw)
    assert where in {".".join(str(p) for p in e["loc"]) for e in info.value.errors()}


def test_the_trusted_header_is_kept_in_lower_case() -> None:
    assert DriftSettings(client_header="X-Forwarded-User").client_header == "x-forwarded-user"
