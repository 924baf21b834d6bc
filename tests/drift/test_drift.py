"""The pure part of live drift: classifying calls, the rolling window, the bound, the verdict."""

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
    breaches,
    classify,
    loosen,
    observe,
    wilson_lower,
    z_for,
)
from gatekeeper.protocols.base import Call
from gatekeeper.tiers import Tier

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


# -- the bound --------------------------------------------------------------------------------


def test_z_for_common_confidences() -> None:
    assert z_for(0.975) == pytest.approx(1.95996, abs=1e-4)
    assert z_for(0.99) == pytest.approx(2.32635, abs=1e-4)


@pytest.mark.parametrize(
    ("failures", "calls", "expected"),
    [
        (0, 0, 0.0),
        (0, 100, 0.0),
        (1, 1, 0.2065),
        (3, 3, 0.4385),
        (2, 20, 0.0279),
        (4, 200, 0.0078),
        (50, 100, 0.4038),
        (10, 10, 0.7225),
    ],
)
def test_wilson_lower_bound_known_values(failures: int, calls: int, expected: float) -> None:
    # Values from the textbook formula at z = 1.96 (95% two-sided).
    assert wilson_lower(failures, calls, 1.96) == pytest.approx(expected, abs=1e-4)


def test_the_bound_tightens_with_more_evidence_at_the_same_rate() -> None:
    lows = [wilson_lower(n // 10, n, 2.326) for n in (10, 100, 1000)]
    assert lows == sorted(lows) and lows[-1] < 0.1


# -- the window -------------------------------------------------------------------------------


def obs(at: float, fault: Fault | None = None) -> Observation:
    return Observation(at, fault, "t", "{}")


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


def test_observed_arguments_are_truncated() -> None:
    seen = observe(call(arguments='{"city": "' + "x" * 500 + '"}'), OFFERED, at=1.0)
    assert seen.fault is None and len(seen.arguments or "") == 121


# -- the verdict ------------------------------------------------------------------------------


def figures(calls: int, **faults: int) -> Figures:
    return Figures(calls, {Fault(k): v for k, v in faults.items()}, 10.0)


def test_no_verdict_below_the_minimum_number_of_calls() -> None:
    ceilings = DriftSettings().ceilings_for(Tier.LARGE)
    assert breaches(figures(19, invalidJson=19), ceilings, 2.326, min_calls=20) == []
    assert [b.fault for b in breaches(figures(20, invalidJson=20), ceilings, 2.326, min_calls=20)] == [
        Fault.INVALID_JSON
    ]


def test_an_occasional_bad_call_is_below_the_large_ceiling() -> None:
    ceilings = DriftSettings().ceilings_for(Tier.LARGE)
    assert breaches(figures(200, invalidArgs=2, notOffered=1), ceilings, z_for(0.99), 20) == []


def test_a_steady_fault_rate_passes_the_ceiling_with_its_evidence() -> None:
    ceilings = DriftSettings().ceilings_for(Tier.LARGE)
    (breach,) = breaches(figures(40, invalidArgs=8), ceilings, z_for(0.99), 20)
    assert (breach.fault, breach.count, breach.calls, breach.ceiling) == (Fault.INVALID_ARGS, 8, 40, 0.02)
    assert breach.lower > 0.02 and "invalidArgs 8/40" in str(breach)


def test_a_null_ceiling_is_never_passed() -> None:
    assert breaches(figures(100, invalidJson=100), Ceilings(), 2.326, 1) == []


# -- settings ---------------------------------------------------------------------------------


def test_a_config_changes_one_ceiling_and_keeps_the_other_defaults() -> None:
    settings = DriftSettings.model_validate({"ceilings": {"large": {"invalid_args": 0.05}}})
    assert settings.ceilings_for(Tier.LARGE) == Ceilings(not_offered=0.02, invalid_json=0.01, invalid_args=0.05)
    assert settings.ceilings_for(Tier.MEDIUM).invalid_args == 0.10


@pytest.mark.parametrize(
    ("raw", "where"),
    [
        ({"ceilings": {"huge": {}}}, "ceilings.huge.[key]"),
        ({"ceilings": {"large": {"invalid_args": 2}}}, "ceilings.large.invalid_args"),
        ({"ceilings": {"large": {"typo": 0.1}}}, "ceilings.large.typo"),
        ({"window_calls": 0}, "window_calls"),
        ({"confidence": 1.0}, "confidence"),
    ],
)
def test_bad_drift_settings_name_the_key(raw: dict, where: str) -> None:
    with pytest.raises(ValidationError) as info:
        DriftSettings.model_validate(raw)
    assert where in {".".join(str(p) for p in e["loc"]) for e in info.value.errors()}
