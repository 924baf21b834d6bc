"""The confidence machinery against a model whose true scores are known (tests/stochastic.py).

A small, deterministic version of scripts/simulate_confidence.py: the full one (hundreds of
measurements per scenario, and 30 through the CLI) is a script, its numbers in docs/statistics.md.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import time

import pytest
from conftest import ROOT
from stochastic import StochasticModel, pass_probabilities, true_scores, true_tier
from structlog.testing import capture_logs

from gatekeeper.measuring.runner import RunSettings, run_test, sweep
from gatekeeper.rules.tiers import Tier, compute_tier
from gatekeeper.suite.loader import CATEGORIES, Suite

# The hard case: the weight-4 chain passing so rarely that toolCalling lands just under large's 0.90.
# Passing half the time did until issue 41 (4/17 of toolCalling: 0.88); of the 23 toolCalling weighs
# since, half the time leaves 0.91, so it passes 3 runs in 10: 1 - 0.7 x 4/23 = 0.878.
CHAIN_PASSES = 0.3


def coin_flip_chain(suite: Suite) -> dict[str, float]:
    targets = {t.name: CHAIN_PASSES if t.name == "tool_chain_distractor_ids" else 1.0 for t in suite.tests}
    return pass_probabilities(suite, targets)


def test_the_true_scores_follow_from_the_pass_probabilities(default_suite):
    probabilities = coin_flip_chain(default_suite)
    truth = true_scores(default_suite, probabilities)
    share = 4 / sum(t.weight for t in default_suite.by_category("toolCalling"))  # the weight-4 chain
    assert truth["instruction"] == truth["json"] == 1.0
    assert truth["toolCalling"] == pytest.approx(1 - (1 - CHAIN_PASSES) * share)
    assert 0.87 < truth["toolCalling"] < 0.9
    assert true_tier(default_suite, probabilities) == Tier.MEDIUM


def test_a_coin_flip_chain_is_not_certified_large_and_its_bounds_hold(default_suite):
    probabilities = coin_flip_chain(default_suite)
    truth = true_scores(default_suite, probabilities)
    for seed in range(3):
        model = StochasticModel(default_suite, probabilities, seed=seed)
        measured = asyncio.run(
            sweep(model.backend(), "m", default_suite, ["default"], RunSettings(samples=12), seed=seed)
        )
        (profile,) = measured.profiles
        assert profile.tier != Tier.LARGE
        assert all(profile.score_intervals[c][0] <= truth[c] for c in CATEGORIES)


def test_a_clearly_large_model_is_certified_large_through_the_cli(default_suite, tmp_path):
    probabilities = pass_probabilities(default_suite, {t.name: 0.99 for t in default_suite.tests})
    with StochasticModel(default_suite, probabilities, seed=3).server() as server:
        done = subprocess.run(
            [sys.executable, "-m", "gatekeeper", "bench", "m", "--effort", "default", "--json", "--seed", "3"]
            + ["--base-url", server.base_url, "--store", str(tmp_path / "p.json")],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=ROOT,
        )
    assert done.returncode == 0, done.stderr
    (result,) = json.loads(done.stdout)["results"]
    (profile,) = result["profiles"]
    assert profile["tier"] == "large"
    assert all(low <= profile["scores"][c] <= high for c, (low, high) in profile["scoreIntervals"].items())
    # `samples` is the calls made in whole passes of the suite (every step of every test), rounded up.
    steps = sum(len(t.all_steps) for t in default_suite.tests)
    assert (profile["samples"] - 1) * steps < result["calls"] <= profile["samples"] * steps


# -- the models a different checker would write (tests/stochastic.py's FaultModel) ----------


def test_a_failing_run_scores_the_same_on_every_instance(default_suite):
    # Partial credit: the chain that stops after step one keeps its first step's checks.
    from stochastic import failing_score

    assert failing_score(default_suite, "tool_chain_random_ids", "first_step") == pytest.approx(0.3)
    assert failing_score(default_suite, "tool_chain_random_ids", "wrong_value") == pytest.approx(0.5)
    assert failing_score(default_suite, "integer_argument", "empty") == 0.0


def test_instance_dependent_failures_have_their_counted_probability(default_suite):
    # integer_argument fails on n in 2..9 of 2..40 (8 of 39 values): the drawn instances agree.
    from stochastic import Behaviour, FaultModel

    model = FaultModel(default_suite, {"integer_argument": Behaviour(0.2, "empty", by_instance=True)})
    truth = model.true_scores()["toolCalling"]
    share = 2 / sum(t.weight for t in default_suite.by_category("toolCalling"))  # integer_argument weighs 2
    assert truth == pytest.approx(1 - share * 8 / 39)
    backend, scores = model.backend(), []
    for k in range(400):
        (test,) = [t for t in default_suite.instance("check", k) if t.name == "integer_argument"]
        run = asyncio.run(run_test(backend, "m", test, None, RunSettings()))
        scores.append(run.score())
    assert sum(scores) / len(scores) == pytest.approx(1 - 8 / 39, abs=0.06)  # about 4 standard errors


def test_whole_samples_failing_together_are_not_certified_large(default_suite):
    # Every test of a sample fails with probability 0.125 (true toolCalling 0.88, medium): the
    # bound that counted a sample's tests as independent evidence certified it large 40% of the time.
    from stochastic import FaultModel

    model = FaultModel(default_suite, {}, bad_sample=0.125)
    truth = model.true_scores()
    assert compute_tier(truth) == Tier.MEDIUM
    for seed in range(3):
        measured = asyncio.run(
            sweep(
                model.with_seed(seed).backend(), "m", default_suite, ["default"], RunSettings(design="whole"), seed=seed
            )
        )
        (profile,) = measured.profiles
        assert profile.tier != Tier.LARGE
        assert all(profile.score_intervals[c][0] <= truth[c] for c in CATEGORIES)


def test_a_level_stops_once_large_is_out_of_reach(default_suite):
    # toolCalling about 0.89 (every tool test fails 12% of its runs): medium is certified early,
    # and large (0.90, the upper bound falling under 0.94) is shown out of reach long before the
    # 200-sample cap, while settling (the upper bound under 0.90) would take hundreds more.
    from stochastic import Behaviour, FaultModel

    tools = {t.name: Behaviour(0.12, "empty") for t in default_suite.by_category("toolCalling")}
    model = FaultModel(default_suite, tools, seed=1)
    with capture_logs() as logs:
        (profile,) = asyncio.run(sweep(model.backend(), "m", default_suite, ["default"], seed=1)).profiles
    assert profile.tier == Tier.MEDIUM and profile.samples < 100
    assert any(e["event"] == "sampling_stopped" and e["reason"] == "out_of_reach" for e in logs)


def test_spaced_rounds_are_apart_in_time_and_make_one_observation_per_category_each(default_suite):
    # A backend whose quality drifts: every first call in a bad 50 ms window fails (each window
    # bad with probability 0.2). Rounds at least 60 ms apart see each window at most once.
    from stochastic import FaultModel

    from gatekeeper.measuring.backends import MockBackend
    from gatekeeper.measuring.runner import Sweep

    model = FaultModel(default_suite, {}, bad_sample=0.2, bad_window_s=0.05, seed=2)
    truth, started = model.true_scores(), []

    def handle(request):
        started.append(time.monotonic())
        return model.backend().handler(request)

    measurement = Sweep(
        MockBackend(handle),
        "m",
        default_suite,
        ["default"],
        RunSettings(design="spaced", spacing_s=0.06),
        None,
        2,
        None,
    )
    measured = asyncio.run(measurement.run())
    (level,) = measurement.levels
    # a category observed k times was observed in k rounds, so its calls are split by k - 1 gaps
    # of at least 60 ms (rounds may observe fewer categories, and a slow moment may add a gap)
    gaps = sum(b - a >= 0.06 for a, b in itertools.pairwise(started))
    assert max(len(plan.failures) for plan in level.plans.values()) <= gaps + 1
    (profile,) = measured.profiles
    assert all(profile.score_intervals[c][0] <= truth[c] for c in CATEGORIES)
    assert compute_tier(truth) == Tier.MEDIUM and profile.tier != Tier.LARGE


def test_a_deterministic_model_at_toolcalling_065_is_certified_medium_within_300_calls(default_suite):
    # Both weight-4 chains always fail (toolCalling 15/23 = 0.652), everything else passes: the
    # tests' own wealths pin each test's rate, where the observations' alone needed 436 calls.
    from stochastic import Behaviour, FaultModel

    chains = ("tool_chain_distractor_ids", "tool_chain_random_ids")
    model = FaultModel(default_suite, {name: Behaviour(1.0) for name in chains})
    assert model.true_scores()["toolCalling"] == pytest.approx(15 / 23)
    for seed in range(3):
        measured = asyncio.run(sweep(model.with_seed(seed).backend(), "m", default_suite, ["default"], seed=seed))
        (profile,) = measured.profiles
        assert profile.tier == Tier.MEDIUM and measured.calls <= 300
        assert profile.scores["toolCalling"] == pytest.approx(15 / 23, abs=1e-4)  # exact, stratified
        assert 0.6 <= profile.score_intervals["toolCalling"][0] <= 15 / 23
