"""`gatekeeper bench` and the runner against the scripted server, over real HTTP."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import answers
import pytest
from conftest import ROOT, SEED_SUITE, needs_seed_suite, wait_until
from scripted import ScriptedServer, SuiteScript

from gatekeeper.config import Settings
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.errors import BackendError, InconclusiveMeasurement, SuiteError
from gatekeeper.measuring.backends import (
    BackendRequest,
    Completion,
    MockBackend,
    OpenAIBackend,
    RequestSettings,
    parse_message,
)
from gatekeeper.measuring.runner import RunSettings, sweep
from gatekeeper.measuring.service import MeasurementService
from gatekeeper.rules.tiers import DEFAULT_SAMPLES
from gatekeeper.store import JsonFileStore
from gatekeeper.store.profile import Profile
from gatekeeper.suite.loader import ANSWER_TOKENS, load_suite
from gatekeeper.types import Answer, ToolCall, strip_reasoning

FIXTURE_SUITE = ROOT / "tests" / "fixtures" / "seed_format_suite"
WIDE = os.environ | {"COLUMNS": "200"}  # rich tables wrap at 80 columns when not on a terminal


def bench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", "bench", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=WIDE,
    )


def run_sweep(server: ScriptedServer, suite, efforts=("default",), samples=DEFAULT_SAMPLES, **request) -> list:
    backend = OpenAIBackend(server.base_url, settings=RequestSettings(**({"max_retries": 0} | request)))
    return asyncio.run(sweep(backend, "m", suite, list(efforts), RunSettings(samples=samples))).profiles


def test_perfect_model_scores_one_in_every_category_of_the_default_suite(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        (profile,) = run_sweep(server, default_suite)
    assert profile.scores == {"instruction": 1.0, "json": 1.0, "toolCalling": 1.0}
    assert profile.tier == "large"
    assert all(r.score == 1.0 for r in profile.test_results)


def test_requests_are_repeatable_and_offer_tools_with_tool_choice_auto(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        run_sweep(server, default_suite)
    assert all(b["temperature"] == 0 for b in server.requests)
    with_tools = [b for b in server.requests if "tools" in b]
    assert with_tools and all(b["tool_choice"] == "auto" for b in with_tools)
    assert not any("reasoning_effort" in b for b in server.requests)


def test_fenced_json_is_repaired_and_still_scores(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.fenced_json)) as server:
        (profile,) = run_sweep(server, default_suite)
    assert profile.scores["json"] == 1.0


def test_broken_chain_scores_remaining_steps_zero_but_counts_them(default_suite):
    chain = next(t for t in default_suite.tests if len(t.all_steps) > 1 and t.all_steps[1].tool_result)
    with ScriptedServer(SuiteScript(default_suite).responder(answers.no_tool_calls)) as server:
        (profile,) = run_sweep(server, default_suite, samples=1)
    result = next(r for r in profile.test_results if r.name == chain.name)
    first_step_weight = sum(c.weight for c in chain.all_steps[0].checks)
    total_weight = sum(c.weight for s in chain.all_steps for c in s.checks)
    assert result.score <= first_step_weight / total_weight
    assert profile.scores["toolCalling"] < 0.6 and profile.tier == "small"
    # The chain stopped: no request ever carried a tool result for that test.
    chain_bodies = [b for b in server.requests if b["messages"][0]["content"] == chain.all_steps[0].prompt]
    assert len(chain_bodies) == 1


def test_wrong_distractor_id_loses_the_chain_points(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.wrong_distractor)) as server:
        (profile,) = run_sweep(server, default_suite)
    assert 0 < profile.scores["toolCalling"] < 1
    assert profile.tier != "large"


def test_integer_sent_as_string_fails_the_integer_check(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.string_integer)) as server:
        (profile,) = run_sweep(server, default_suite)
    assert min(r.score for r in profile.test_results if r.category == "toolCalling") < 1


def test_tool_result_answers_the_first_tool_call_of_the_previous_step(default_suite):
    chain = next(t for t in default_suite.tests if len(t.all_steps) > 1 and t.all_steps[1].tool_result)
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        run_sweep(server, default_suite)
    second = next(
        b
        for b in server.requests
        if b["messages"][0]["content"] == chain.all_steps[0].prompt and len(b["messages"]) > 1
    )
    assistant, tool_message = second["messages"][1], second["messages"][2]
    assert tool_message == {
        "role": "tool",
        "tool_call_id": assistant["tool_calls"][0]["id"],
        "content": chain.all_steps[1].tool_result,
    }


def test_seed_format_suite_loads_and_scores_unchanged():
    suite = load_suite(FIXTURE_SUITE)
    with ScriptedServer(SuiteScript(suite).responder(answers.perfect)) as server:
        (profile,) = run_sweep(server, suite)
    assert profile.scores == {"instruction": 1.0, "json": 1.0, "toolCalling": 1.0}


@needs_seed_suite
def test_the_seed_systems_own_suite_scores_unchanged():
    suite = load_suite(SEED_SUITE)
    with ScriptedServer(SuiteScript(suite).responder(answers.perfect)) as server:
        (profile,) = run_sweep(server, suite)
    assert profile.scores == {"instruction": 1.0, "json": 1.0, "toolCalling": 1.0}


def test_effort_levels_are_measured_separately(default_suite):
    def by_effort(body: dict) -> dict:
        behaviour = answers.perfect if body.get("reasoning_effort") == "xhigh" else answers.no_tool_calls
        return SuiteScript(default_suite).responder(behaviour)(body)

    with ScriptedServer(by_effort) as server:
        low, xhigh = run_sweep(server, default_suite, efforts=("low", "xhigh"))
    assert (low.reasoning_effort, low.tier) == ("low", "small")
    assert (xhigh.reasoning_effort, xhigh.tier) == ("xhigh", "large")
    assert {b.get("reasoning_effort") for b in server.requests} == {"low", "xhigh"}


def refusing_effort(suite):
    """A perfect answerer behind a server that refuses the `reasoning_effort` field with HTTP 400."""
    script = SuiteScript(suite).responder(answers.perfect)

    def no_effort(body: dict) -> dict:
        if "reasoning_effort" in body:
            return {"status": 400, "error": "Unrecognized request argument supplied: reasoning_effort"}
        return script(body)

    return no_effort


def test_rejected_effort_field_is_recorded_as_not_applied(default_suite):
    with ScriptedServer(refusing_effort(default_suite)) as server:
        (profile,) = run_sweep(server, default_suite, efforts=("low",))
    assert profile.effort_applied is False and profile.reasoning_effort == "low"
    assert profile.tier == "large"


def test_levels_whose_effort_the_backend_refused_take_defaults_evidence_after_one_round(default_suite):
    efforts = ["default", "none", "low", "medium", "xhigh"]
    with ScriptedServer(refusing_effort(default_suite)) as server:
        measured, alone = (
            asyncio.run(sweep(OpenAIBackend(server.base_url), "m", default_suite, levels, RunSettings(), seed=5))
            for levels in (efforts, ["default"])
        )
    assert measured.shared == dict.fromkeys(efforts[1:], "default")
    profiles = {p.reasoning_effort: p for p in measured.profiles}
    assert set(profiles) == set(efforts)
    for effort in efforts[1:]:  # default's scores, bounds and tier; marked as not applied
        assert profiles[effort].effort_applied is False
        same = ("tier", "scores", "score_intervals", "samples")
        assert [getattr(profiles[effort], f) for f in same] == [getattr(profiles["default"], f) for f in same]
        assert all(r["state"] == "shared with default" for r in measured.reports[effort].values())
    # each shared level paid for its first round only: one run of every test, every step
    first_round = sum(len(t.all_steps) for t in default_suite.tests)
    assert measured.calls == alone.calls + 4 * first_round


def test_retries_a_flaky_backend_then_succeeds(default_suite):
    script = SuiteScript(default_suite).responder(answers.perfect)
    seen: set[str] = set()

    def flaky(body: dict) -> dict:
        # Every request fails once, then succeeds when retried (whatever the interleaving).
        key = json.dumps(body, sort_keys=True)
        if key not in seen:
            seen.add(key)
            return {"status": 503, "error": "busy"}
        return script(body)

    with ScriptedServer(flaky) as server:
        (profile,) = run_sweep(server, default_suite, max_retries=3, backoff_s=0.01)
    assert profile.tier == "large"


def test_backend_that_keeps_failing_raises_instead_of_scoring(default_suite):
    with ScriptedServer(lambda body: {"status": 500, "error": "broken"}) as server:
        with pytest.raises(BackendError, match="HTTP 500"):
            run_sweep(server, default_suite, max_retries=1, backoff_s=0.01)


class FailingOnce:
    """A backend whose first call fails while every other call is still waiting for its answer."""

    provider = "mock"

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0

    async def complete(self, model, messages, tools, effort, need=None):
        self.started += 1
        if self.started == 1:
            await asyncio.sleep(0.05)  # the others start meanwhile
            raise BackendError("HTTP 401: no key")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def list_models(self):
        return []

    async def aclose(self):
        pass


def test_a_failed_call_cancels_every_call_still_in_flight_before_the_failure_is_raised(default_suite):
    # Otherwise they outlive the measurement and hit its closed backend (a traceback in the log).
    backend = FailingOnce()

    async def measure():
        with pytest.raises(BackendError, match="no key"):
            await sweep(backend, "m", default_suite, ["default", "low"], RunSettings(concurrency=8))
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    left = asyncio.run(measure())
    assert left == []
    assert backend.started > 2 and backend.cancelled == backend.started - 1


# -- the command -----------------------------------------------------------------------------


def test_bench_command_sweeps_default_and_four_levels_stores_profiles_and_recommends(tmp_path, default_suite):
    def cheap_is_weak(body: dict) -> dict:
        weak = body.get("reasoning_effort") in ("none", "low")
        behaviour = answers.no_tool_calls if weak else answers.perfect
        return SuiteScript(default_suite).responder(behaviour)(body)

    store = tmp_path / "profiles.json"
    with ScriptedServer(cheap_is_weak) as server:
        done = bench("m", "--base-url", server.base_url, "--store", str(store), "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)["results"][0]
    # `default` (no effort field, what most clients send) is measured too, but never recommended.
    assert [p["reasoningEffort"] for p in result["profiles"]] == ["default", "none", "low", "medium", "xhigh"]
    assert all(p["durationS"] > 0 for p in result["profiles"])
    assert result["recommendedEffort"] == "medium"
    saved = json.loads(store.read_text())
    assert set(saved["profiles"]) == {"m@default", "m@none", "m@low", "m@medium", "m@xhigh"}
    assert saved["recommendations"] == {"m": "medium"}
    assert saved["profiles"]["m@medium"]["testsHash"] == default_suite.hash
    assert {
        "tokensPerSecond",
        "avgCompletionTokens",
        "testedAt",
        "benchmarkVersion",
        "testResults",
        "provider",
        "scores",
        "tier",
    } <= set(saved["profiles"]["m@medium"])


def test_bench_all_measures_every_listed_model(tmp_path, default_suite):
    store = tmp_path / "profiles.json"
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect), models=("a", "b")) as server:
        done = bench("--all", "--effort", "default", "--base-url", server.base_url, "--store", str(store), "--json")
    assert done.returncode == 0, done.stderr
    assert [r["model"] for r in json.loads(done.stdout)["results"]] == ["a", "b"]
    assert set(json.loads(store.read_text())["profiles"]) == {"a@default", "b@default"}


def test_failed_backend_exits_nonzero_and_stores_nothing(tmp_path):
    store = tmp_path / "profiles.json"
    with ScriptedServer(lambda body: {"status": 500, "error": "kaput"}) as server:
        config = tmp_path / "gk.yaml"
        config.write_text(f"upstream:\n  base_url: {server.base_url}\nbench:\n  max_retries: 1\n")
        done = bench("m", "--config", str(config), "--store", str(store), "--effort", "low")
    assert done.returncode != 0
    assert "backend failed, no profile stored" in done.stderr and "HTTP 500" in done.stderr
    assert not store.exists()


def test_unreachable_backend_is_a_clear_error(tmp_path):
    from scripted import free_port

    done = bench(
        "m", "--base-url", f"http://127.0.0.1:{free_port()}/v1", "--store", str(tmp_path / "p.json"), "--effort", "low"
    )
    assert done.returncode != 0 and "connection failed" in done.stderr


def test_editing_a_suite_file_invalidates_stored_profiles(tmp_path, default_suite):
    suite_dir = tmp_path / "suite"
    shutil.copytree(FIXTURE_SUITE, suite_dir)
    config = tmp_path / "gk.yaml"
    store = tmp_path / "profiles.json"
    with ScriptedServer(SuiteScript(load_suite(suite_dir)).responder(answers.perfect)) as server:
        config.write_text(f"upstream:\n  base_url: {server.base_url}\nsuite: suite\nstore: profiles.json\n")
        assert bench("m", "--config", str(config), "--effort", "default").returncode == 0
    settings = Settings.model_validate({"suite": str(suite_dir), "store": str(store)})
    assert Gatekeeper(settings).lookup("m").source == "measured"
    first = sorted(suite_dir.glob("*.json"))[0]
    first.write_bytes(first.read_bytes() + b"\n")  # same meaning, different bytes
    gk = Gatekeeper(settings)
    assert gk.lookup("m") is None
    assert JsonFileStore(store).get("m@default").tests_hash != gk.suite.hash


def test_bench_will_not_overwrite_a_file_that_is_not_a_store(tmp_path, default_suite):
    other = tmp_path / "notes.txt"
    other.write_text("not json, not ours\n")
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        done = bench("m", "--effort", "default", "--base-url", server.base_url, "--store", str(other))
    assert done.returncode != 0 and "refusing to replace it" in done.stderr
    assert other.read_text() == "not json, not ours\n"


# -- the measurement service (one path for bench, core, admin), with an injected fake backend --


def mock_answering(script: SuiteScript, behaviour) -> MockBackend:
    """A MockBackend giving `behaviour`'s message for each suite conversation (no HTTP)."""

    def handle(request: BackendRequest) -> Answer:
        test, step = script.locate({"messages": request.messages})
        message = behaviour(test, step)
        calls = tuple(
            ToolCall(f"call_{i}", c["name"], json.dumps(c["arguments"])) for i, c in enumerate(message["tool_calls"])
        )
        return Answer(message["content"] or "", calls)

    return MockBackend(handle)


def test_service_sweep_saves_profiles_and_recommendation_through_an_injected_backend(tmp_path, default_suite):
    backends: list[MockBackend] = []

    def factory(model: str) -> MockBackend:
        backends.append(mock_answering(SuiteScript(default_suite), answers.perfect))
        return backends[-1]

    store = JsonFileStore(tmp_path / "p.json")
    service = MeasurementService(Settings(), default_suite, store, factory)
    result = asyncio.run(service.sweep("m", ["low", "medium"]))
    assert [p.tier for p in result.profiles] == ["large", "large"]
    assert result.recommended == "low"
    assert store.load().recommendations == {"m": "low"}
    assert backends[0].closed and {r.effort for r in backends[0].requests} == {"low", "medium"}


def test_lazy_path_goes_through_the_service_and_saves_a_recommendation(tmp_path, default_suite):
    settings = Settings.model_validate({"store": str(tmp_path / "p.json")})
    gk = Gatekeeper(settings, backend_factory=lambda model: mock_answering(SuiteScript(default_suite), answers.perfect))
    try:
        profile = gk.measure("m", "low").result(timeout=30)
    finally:
        gk.close()
    assert profile.tier == "large" and profile.reasoning_effort == "low"
    assert JsonFileStore(settings.store).load().recommendations == {"m": "low"}


def test_measurement_uses_the_configured_upstream_key_never_another(tmp_path, default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        settings = Settings.model_validate(
            {"upstream": {"base_url": server.base_url, "api_key": "operator-key"}, "store": str(tmp_path / "p.json")}
        )
        service = MeasurementService(settings, default_suite, JsonFileStore(settings.store))
        asyncio.run(service.measure("m"))
    assert {h["authorization"] for h in server.headers} == {"Bearer operator-key"}


# -- reasoning is not the answer (issue 16) ----------------------------------------------------


def thinking_aloud(test, step: int) -> dict:
    """Perfect, but every text answer starts with a think block full of wrong words and JSON."""
    message = answers.perfect(test, step)
    if message["content"]:
        message["content"] = (
            '<think>Maybe {"total": 1}? Start with "Wrong", use commas, call delete_file.\n'
            "Lines\nand\nlines.</think>\n" + message["content"]
        )
    return message


def test_think_blocks_are_removed_before_checks_so_a_thinking_model_scores_as_it_answers(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(thinking_aloud)) as server:
        (profile,) = run_sweep(server, default_suite)
    assert profile.scores == {"instruction": 1.0, "json": 1.0, "toolCalling": 1.0}


def test_reasoning_fields_and_think_blocks_never_reach_the_checks():
    message = {
        "role": "assistant",
        "content": "<think>no, 12</think>\n42",
        "reasoning_content": "7 * 6 = 42",
        "reasoning": "long thoughts",
    }
    answer = parse_message(message, "stop")
    assert answer == Answer("42", (), "stop")


@pytest.mark.parametrize(
    ("content", "answer"),
    [
        ("<think>a</think>b<think>c</think>d", "bd"),
        ("Answer: 42<think>and then I ran out", "Answer: 42"),  # cut while thinking again
        ("<think>only thoughts, cut at max_tokens", ""),
        ("thoughts whose opening tag was in the prompt</think>\nParis", "Paris"),
        ("  no reasoning at all \n", "  no reasoning at all \n"),  # untouched: scored as sent
    ],
)
def test_strip_reasoning(content, answer):
    assert strip_reasoning(content) == answer


# -- inconclusive measurements (issue 9) --------------------------------------------------------


def spent_thinking(request: BackendRequest) -> Completion:
    """A reasoning model whose whole bench.max_tokens went to thinking: HTTP 200, nothing said."""
    return Completion(Answer("", (), "length"), completion_tokens=512, seconds=0.01, effort_applied=True)


def test_almost_all_empty_answers_cut_at_the_limit_are_inconclusive_and_store_nothing(tmp_path, default_suite):
    store = JsonFileStore(tmp_path / "p.json")
    service = MeasurementService(Settings(), default_suite, store, lambda model: MockBackend(spent_thinking))
    with pytest.raises(InconclusiveMeasurement, match=r"bench\.max_tokens"):
        asyncio.run(service.measure("thinker"))
    assert store.load().profiles == {} and not store.path.exists()


def test_an_inconclusive_lazy_measurement_backs_off_like_a_failure(tmp_path, default_suite):
    backends: list[MockBackend] = []

    def factory(model: str) -> MockBackend:
        backends.append(MockBackend(spent_thinking))
        return backends[-1]

    settings = Settings.model_validate({"store": str(tmp_path / "p.json"), "bench": {"retry_after_s": 3600}})
    gk = Gatekeeper(settings, backend_factory=factory)
    try:
        flight = gk.measure("thinker")
        with pytest.raises(InconclusiveMeasurement):
            flight.result(timeout=30)
        # the failure is recorded as it lands
        wait_until(lambda: gk.tier_for("thinker")[1] == "unmeasured", "the failure to be recorded")
        assert gk.lookup("thinker") is None
        assert len(backends) == 1  # backing off: the request above did not start another one
    finally:
        gk.close()


def test_a_few_empty_answers_are_scored_not_treated_as_inconclusive(tmp_path, default_suite):
    script = SuiteScript(default_suite)
    short_ones = {t.name for t in default_suite.tests[:2]}

    def mostly_fine(request: BackendRequest) -> Answer:
        test, step = script.locate({"messages": request.messages})
        if test.name in short_ones:
            return Answer("", (), "length")
        message = answers.perfect(test, step)
        return Answer(
            message["content"] or "",
            tuple(
                ToolCall(f"c{i}", c["name"], json.dumps(c["arguments"])) for i, c in enumerate(message["tool_calls"])
            ),
        )

    service = MeasurementService(
        Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda model: MockBackend(mostly_fine)
    )
    profile = asyncio.run(service.measure("m"))
    assert profile.scores["instruction"] < 1.0


# -- samples, intervals, sequential stopping (issue 16) ----------------------------------------


def sampled(samples: int, design: str = "adaptive") -> Settings:
    # tool_budget off: these tests count the tier's calls (the budget's: tests/measuring/test_budget.py).
    return Settings.model_validate({"bench": {"samples": samples, "design": design, "tool_budget": False}})


def calls_per_pass(suite) -> int:
    return sum(len(t.all_steps) for t in suite.tests)


def test_a_confident_model_stops_sampling_early_and_reports_the_calls_saved(tmp_path, default_suite):
    backend = mock_answering(SuiteScript(default_suite), answers.perfect)
    service = MeasurementService(
        sampled(50, "whole"), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend
    )
    result = asyncio.run(service.sweep("m", ["low"]))
    (profile,) = result.profiles
    # Every check of every sample passed, yet the bounds keep their width: 32 samples are what it
    # takes for toolCalling's bound to reach 0.90 at risk 0.05 (and the level stops there).
    assert profile.samples == 32 and profile.tier == "large"
    assert all(0.85 <= low < 1.0 == high for low, high in profile.score_intervals.values())
    assert len(backend.requests) == 32 * calls_per_pass(default_suite)
    assert result.calls_saved == 18 * calls_per_pass(default_suite)


def test_a_model_passing_every_check_is_certified_large_in_about_140_calls(tmp_path, default_suite):
    # The adaptive design: one whole run of each category, then single tests drawn by weight,
    # each category stopping once its bound passes its threshold (issue 29: at most 150 calls).
    backend = mock_answering(SuiteScript(default_suite), answers.perfect)
    service = MeasurementService(sampled(50), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend)
    result = asyncio.run(service.sweep("m", ["low"]))
    (profile,) = result.profiles
    assert profile.tier == "large" and len(backend.requests) == result.calls <= 150
    assert result.calls_saved == 50 * calls_per_pass(default_suite) - result.calls
    report = result.categories["low"]
    assert sum(r["calls"] for r in report.values()) == result.calls
    for category, r in report.items():
        assert r["state"] == "decided" and r["needed"] == 0 and r["observations"]["whole"] == 1
        assert r["bound"] == profile.score_intervals[category]
    # Every test ran (the first observation of each category is whole): testResults name them all.
    assert {t.name for t in profile.test_results} == {t.name for t in default_suite.tests}


def once_wrong_answers():
    seen: dict[str, int] = {}

    def once_wrong(test, step):
        # integer_argument: no call at all in the first of its samples, perfect afterwards.
        if test.name == "integer_argument":
            seen[test.name] = seen.get(test.name, 0) + 1
            if seen[test.name] == 1:
                return answers.no_tool_calls(test, step)
        return answers.perfect(test, step)

    return once_wrong


def test_a_model_that_fails_once_is_not_large_on_its_mean(tmp_path, default_suite):
    backend = mock_answering(SuiteScript(default_suite), once_wrong_answers())
    service = MeasurementService(
        sampled(32, "whole"), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend
    )
    (profile,) = asyncio.run(service.sweep("m", ["low"])).profiles
    low, _ = profile.score_intervals["toolCalling"]
    assert profile.samples == 32  # a perfect model would be certified large here
    assert profile.scores["toolCalling"] >= 0.9 > low  # the mean alone would have made it large
    assert profile.tier == "medium"
    assert profile.scores["instruction"] == 1.0 and profile.score_intervals["instruction"][0] >= 0.85


def test_one_failure_in_a_whole_observation_costs_the_adaptive_design_calls_not_the_tier(tmp_path, default_suite):
    # The failure lands in toolCalling's first (whole) observation, where it moves Z by
    # integer_argument's share only; the bets after it are chosen knowing it: the bound still
    # reaches 0.90, later than for a model that never failed, and the tier is what the bound says.
    perfect = asyncio.run(
        sweep(mock_answering(SuiteScript(default_suite), answers.perfect), "m", default_suite, ["low"], seed=0)
    )
    backend = mock_answering(SuiteScript(default_suite), once_wrong_answers())
    measured = asyncio.run(sweep(backend, "m", default_suite, ["low"], seed=0))
    (profile,) = measured.profiles
    low, _ = profile.score_intervals["toolCalling"]
    assert profile.scores["toolCalling"] < 1.0 and low >= 0.9 and profile.tier == "large"
    tool = measured.reports["low"]["toolCalling"]["calls"]
    assert tool > perfect.reports["low"]["toolCalling"]["calls"]


def test_bench_prints_the_estimate_the_bound_and_what_it_would_need(tmp_path, default_suite):
    store = tmp_path / "p.json"
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        done = bench(
            "m",
            "--effort",
            "low",
            "--samples",
            "12",
            "--design",
            "whole",
            "--base-url",
            server.base_url,
            "--store",
            str(store),
        )
    assert done.returncode == 0, done.stderr
    out = " ".join(done.stdout.split())
    calls = sum(len(t.all_steps) for t in default_suite.tests)  # one whole pass: 26 calls
    tool_calls = sum(len(t.all_steps) for t in default_suite.by_category("toolCalling"))
    assert f"m@low: certified medium at risk 0.05 after {12 * calls} calls" in out  # 12 whole passes
    assert f"toolCalling 1.00, bound 0.76 ({12 * tool_calls} calls: whole 12) < 0.90: certified medium; about " in out
    assert "more calls would decide" in out
    shown = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "profiles", "--store", str(store)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=WIDE,
    )
    assert "1.00 (>= 0.76" in shown.stdout


def test_a_seed_format_profile_reads_as_one_sample(default_suite):
    doc = {
        "model": "m",
        "provider": "p",
        "tier": "medium",
        "scores": {"instruction": 0.5, "json": 0.7, "toolCalling": 0.7},
        "tokensPerSecond": 1,
        "testedAt": "2026-01-01T00:00:00+00:00",
        "benchmarkVersion": 1,
        "testsHash": "abcd1234",
        "testResults": [],
        "reasoningEffort": "low",
        "avgCompletionTokens": 3,
    }
    profile = Profile.model_validate(doc)
    assert (profile.samples, profile.score_intervals, profile.instance_seed) == (None, None, None)
    assert profile.to_json() == doc | {"effortApplied": True, "durationS": 0.0}  # nothing added on write


# -- the default sweep and a backend that ignores the effort (issue 16) ----------------------------


def test_a_backend_that_ignores_the_effort_is_recognised(tmp_path, default_suite):
    backend = mock_answering(SuiteScript(default_suite), answers.perfect)  # same answers whatever the effort
    service = MeasurementService(Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend)
    result = asyncio.run(service.sweep("m"))
    assert [p.reasoning_effort for p in result.profiles] == ["default", "none", "low", "medium", "xhigh"]
    assert result.effort_ignored and "levels made no difference" in result.note
    assert [p.effort_applied for p in result.profiles] == [True, False, False, False, False]
    assert result.recommended == "none"  # still an explicit level, but stated as no difference
    assert result.to_json()["effortIgnored"] is True


def test_levels_that_differ_only_in_completion_tokens_are_not_called_ignored(tmp_path, default_suite):
    script = SuiteScript(default_suite)

    def more_tokens_when_thinking(request: BackendRequest) -> Completion:
        test, step = script.locate({"messages": request.messages})
        message = answers.perfect(test, step)
        answer = Answer(
            message["content"] or "",
            tuple(
                ToolCall(f"c{i}", c["name"], json.dumps(c["arguments"])) for i, c in enumerate(message["tool_calls"])
            ),
        )
        return Completion(answer, 7 if request.effort in (None, "none") else 70, 0.01, True)

    service = MeasurementService(
        Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: MockBackend(more_tokens_when_thinking)
    )
    result = asyncio.run(service.sweep("m", ["none", "low"]))
    assert not result.effort_ignored and all(p.effort_applied for p in result.profiles)


def test_bench_says_when_the_levels_made_no_difference(tmp_path, default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        done = bench("m", "--effort", "none,low", "--base-url", server.base_url, "--store", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stderr
    assert "levels made no difference" in " ".join(done.stdout.split())


# -- randomised tests (issue 16) ------------------------------------------------------------------


def random_prompts(server: ScriptedServer) -> set[str]:
    return {
        b["messages"][0]["content"]
        for b in server.requests
        if "customer" in b["messages"][0]["content"] and "our customer" in b["messages"][0]["content"]
    }


def test_each_seed_draws_a_new_instance_that_a_perfect_answerer_still_passes(tmp_path, default_suite):
    prompts = []
    for seed in (1, 2):
        with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
            service = MeasurementService(
                Settings.model_validate({"upstream": {"base_url": server.base_url}}),
                default_suite,
                JsonFileStore(tmp_path / f"{seed}.json"),
            )
            profile = asyncio.run(service.measure("m", seed=seed))
        assert profile.scores == {"instruction": 1.0, "json": 1.0, "toolCalling": 1.0}
        assert profile.instance_seed == seed
        prompts.append(random_prompts(server))
    assert prompts[0] and prompts[0] != prompts[1]


def test_a_recorded_seed_replays_the_same_requests(tmp_path, default_suite):
    bodies = []
    for _ in range(2):
        with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
            done = bench(
                "m",
                "--effort",
                "default",
                "--seed",
                "77",
                "--json",
                "--concurrency",
                "1",
                "--base-url",
                server.base_url,
                "--store",
                str(tmp_path / "p.json"),
            )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["results"][0]["profiles"][0]["instanceSeed"] == 77
        # What the model was given (the scripted server's call ids are random, the inputs must not be).
        bodies.append(
            sorted(
                json.dumps([[m["role"], m["content"]] for m in b["messages"] if m["role"] != "assistant"])
                for b in server.requests
            )
        )
    assert bodies[0] == bodies[1]


def test_without_a_seed_every_measurement_draws_one_and_keeps_it(tmp_path, default_suite):
    backend = mock_answering(SuiteScript(default_suite), answers.perfect)
    service = MeasurementService(Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend)
    seeds = {asyncio.run(service.measure("m")).instance_seed for _ in range(3)}
    assert None not in seeds and len(seeds) > 1
    assert JsonFileStore(tmp_path / "p.json").get("m@default").instance_seed in seeds


def test_wrong_distractor_id_in_a_random_chain_loses_its_points(tmp_path, default_suite):
    backend = mock_answering(SuiteScript(default_suite), answers.wrong_distractor)
    service = MeasurementService(Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend)
    profile = asyncio.run(service.measure("m", seed=5))
    scores = {r.name: r.score for r in profile.test_results}
    assert scores["tool_chain_random_ids"] < 1.0 and scores["tool_chain_distractor_ids"] < 1.0


def test_admin_api_shows_scores_with_their_interval(store_path, default_suite):
    import httpx
    from conftest import running_proxy, settings_for

    auth = {"authorization": "Bearer k"}
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as upstream:
        settings = settings_for(
            upstream.base_url,
            store_path,
            admin_key="k",
            bench={"samples": 3, "design": "whole", "max_retries": 0, "timeout_s": 10},
        )
        with running_proxy(settings) as proxy:
            assert httpx.post(proxy.url + "/admin/profiles/m@low/benchmark", headers=auth).status_code == 202
            # generous: 2 cores shared by many test runs
            wait_until(lambda: proxy.gk.lookup("m", "low"), "the measurement to land", timeout_s=180)
            listed = httpx.get(proxy.url + "/admin/profiles", headers=auth).json()["profiles"]["m@low"]
    # 3 samples cannot certify large at risk 0.05 (32 can): the level ran all 3.
    assert listed["samples"] == 3 and 0.2 < listed["scoreIntervals"]["json"][0] < 1.0
    assert all(shown.startswith("1.00 (>= 0.") for shown in listed["shown"].values())


@pytest.mark.parametrize("seed", [*range(12), 513248310])  # 513248310 draws the preview's chain names
def test_a_scripted_perfect_answerer_passes_every_drawn_instance(tmp_path, default_suite, seed):
    backend = mock_answering(SuiteScript(default_suite), answers.perfect)
    service = MeasurementService(Settings(), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend)
    profile = asyncio.run(service.measure("m", seed=seed))
    assert profile.scores == {"instruction": 1.0, "json": 1.0, "toolCalling": 1.0}


# -- ignored effort with a sampling backend (issue 21) ---------------------------------------------


def sampling_backend(default_suite, tokens_for) -> MockBackend:
    """Answers perfectly or not at all at random, with completion tokens drawn by `tokens_for`."""
    import random

    # A fixed draw (the mock runs in a fixed order); over draws, an ignoring backend is taken for
    # one that applies the effort about 1 time in 10 (two tests at 5%).
    script, rng = SuiteScript(default_suite), random.Random(0)

    def handle(request: BackendRequest) -> Completion:
        test, step = script.locate({"messages": request.messages})
        message = answers.perfect(test, step) if rng.random() < 0.9 else {"content": "", "tool_calls": []}
        calls = tuple(
            ToolCall(f"c{i}", c["name"], json.dumps(c["arguments"])) for i, c in enumerate(message["tool_calls"])
        )
        return Completion(Answer(message["content"] or "", calls), tokens_for(rng, request.effort), 0.01, True)

    return MockBackend(handle)


def test_a_sampling_backend_that_ignores_the_effort_is_recognised(tmp_path, default_suite):
    backend = sampling_backend(default_suite, lambda rng, effort: rng.randint(20, 60))  # same at every level
    settings = sampled(3, "whole")  # the blocks are whole samples, alike at every level
    service = MeasurementService(settings, default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend)
    result = asyncio.run(service.sweep("m", ["low", "high"]))
    assert result.effort_ignored
    assert [p.effort_applied for p in result.profiles] == [False, False]


def test_a_sampling_backend_that_thinks_longer_at_high_effort_is_not_called_ignored(tmp_path, default_suite):
    backend = sampling_backend(default_suite, lambda rng, effort: rng.randint(20, 60) + (40 if effort == "high" else 0))
    service = MeasurementService(
        sampled(3, "whole"), default_suite, JsonFileStore(tmp_path / "p.json"), lambda m: backend
    )
    result = asyncio.run(service.sweep("m", ["low", "high"]))
    assert not result.effort_ignored and all(p.effort_applied for p in result.profiles)


# -- a conversation longer than the model's context -----------------------------------------------


def _overflowing(message: str):
    """Perfect, except that the second step of every multi-step test is answered with a 400."""

    def behaviour(test, step: int) -> dict:
        if step == 1:
            return {"status": 400, "error": message}
        return answers.perfect(test, step)

    return behaviour


def test_a_prompt_over_the_context_fails_that_test_not_the_measurement(tmp_path, default_suite):
    # llama.cpp's (and OpenAI's) wording: the model cannot hold the test, which it then fails.
    too_long = "This model's maximum context length is 4096 tokens. However, you requested 4352 tokens"
    with ScriptedServer(SuiteScript(default_suite).responder(_overflowing(too_long))) as server:
        settings = Settings.model_validate(
            {"upstream": {"base_url": server.base_url}, "store": str(tmp_path / "p.json"), "bench": {"risk": 1}}
        )
        profile = asyncio.run(MeasurementService(settings, default_suite, JsonFileStore(settings.store)).measure("m"))
    multi_step = {t.name for t in default_suite.tests if len(t.all_steps) > 1}
    assert multi_step, "the default suite has multi-step tests"
    failed = {r.name for r in profile.test_results if r.score < 1}
    assert multi_step <= failed
    assert profile.scores["toolCalling"] < 1


def test_any_other_400_is_still_a_backend_failure_and_stores_nothing(tmp_path, default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(_overflowing("unsupported parameter: seed"))) as server:
        settings = Settings.model_validate(
            {"upstream": {"base_url": server.base_url}, "store": str(tmp_path / "p.json")}
        )
        store = JsonFileStore(settings.store)
        with pytest.raises(BackendError, match="HTTP 400"):
            asyncio.run(MeasurementService(settings, default_suite, store).measure("m"))
    assert store.load().profiles == {}


# -- each call bounded by what its test needs (issue 43) ---------------------------------------


def test_each_call_asks_for_the_tokens_its_test_needs_under_the_ceiling(default_suite):
    script = SuiteScript(default_suite)
    with ScriptedServer(script.responder(answers.perfect)) as server:
        run_sweep(server, default_suite)
    asked = {script.locate(b)[0].category: b["max_tokens"] for b in server.requests}
    assert asked == ANSWER_TOKENS
    with ScriptedServer(script.responder(answers.perfect)) as server:
        run_sweep(server, default_suite, max_tokens=100)
    assert {b["max_tokens"] for b in server.requests} == {100}


def test_an_explicit_effort_level_gets_the_configured_room_to_think(default_suite):
    with ScriptedServer(SuiteScript(default_suite).responder(answers.perfect)) as server:
        run_sweep(server, default_suite, efforts=("low",))
    assert {b["max_tokens"] for b in server.requests} == {512}


def test_a_test_file_may_say_how_long_its_answer_is(tmp_path):
    (tmp_path / "t.json").write_text(
        json.dumps(
            {"name": "t", "category": "json", "maxTokens": 40, "prompt": "p", "checks": [{"type": "json_valid"}]}
        )
    )
    assert load_suite(tmp_path).tests[0].answer_tokens == 40
    (tmp_path / "t.json").write_text(
        json.dumps({"name": "t", "category": "json", "maxTokens": 0, "prompt": "p", "checks": [{"type": "json_valid"}]})
    )
    with pytest.raises(SuiteError, match="maxTokens"):
        load_suite(tmp_path)


def _one_test(default_suite, name: str, change: dict):
    """Perfect answers, but `name`'s answers come with `change` (cut short, or slow)."""
    script = SuiteScript(default_suite)

    def respond(body: dict) -> dict:
        test, step = script.locate(body)
        return answers.perfect(test, step) | (change if test.name == name else {})

    return respond


def test_an_answer_cut_at_its_token_bound_is_a_failed_answer(default_suite):
    with ScriptedServer(_one_test(default_suite, "sentence_seven_words", {"finish_reason": "length"})) as server:
        (profile,) = run_sweep(server, default_suite, samples=1)
    scores = {r.name: r.score for r in profile.test_results}
    assert scores.pop("sentence_seven_words") == 0  # the text would pass: cut, it is not an answer
    assert set(scores.values()) == {1.0}


def test_an_answer_past_its_time_bound_is_a_failed_answer_and_the_measurement_goes_on(default_suite):
    slow = _one_test(default_suite, "json_inventory_selection", {"delay_s": 30})
    with ScriptedServer(slow) as server:
        (profile,) = run_sweep(server, default_suite, samples=1, prompt_allowance_s=0.5, min_tokens_per_s=1e6)
    scores = {r.name: r.score for r in profile.test_results}
    assert scores.pop("json_inventory_selection") == 0
    assert set(scores.values()) == {1.0}


def test_bench_says_which_answers_were_cut_short_and_why(tmp_path, default_suite):
    script = SuiteScript(default_suite)

    def rambling_sentence(body: dict) -> dict:  # a server that ignored max_tokens, and says `stop`
        test, step = script.locate(body)
        reply = answers.perfect(test, step)
        return reply | ({"completion_tokens": 50_000} if test.name == "sentence_seven_words" else {})

    with ScriptedServer(rambling_sentence) as server:
        done = bench("m", "--effort", "low", "--base-url", server.base_url, "--store", str(tmp_path / "p.json"))
    assert done.returncode == 0, done.stderr
    cut = [line.strip() for line in done.stdout.splitlines() if "cut short" in line]
    assert len(cut) == 1 and cut[0].startswith("answers cut short, scored as failed: sentence_seven_words ")
    assert cut[0].endswith(" past its token bound")
