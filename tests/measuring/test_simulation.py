"""The confidence machinery against a model whose true scores are known (tests/stochastic.py).

A small, deterministic version of scripts/simulate_confidence.py: the full one (hundreds of
measurements per scenario, and 30 through the CLI) is a script, its numbers in docs/statistics.md.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from conftest import ROOT
from stochastic import StochasticModel, pass_probabilities, true_scores, true_tier

from gatekeeper.measuring.runner import RunSettings, sweep
from gatekeeper.suite.loader import CATEGORIES, Suite
from gatekeeper.tiers import Tier


def coin_flip_chain(suite: Suite) -> dict[str, float]:
    targets = {t.name: 0.5 if t.name == "tool_chain_distractor_ids" else 1.0 for t in suite.tests}
    return pass_probabilities(suite, targets)


def test_the_true_scores_follow_from_the_pass_probabilities(default_suite):
    probabilities = coin_flip_chain(default_suite)
    truth = true_scores(default_suite, probabilities)
    assert truth["instruction"] == truth["json"] == 1.0
    assert truth["toolCalling"] == pytest.approx(1 - 0.5 * 4 / 17)  # the weight-4 chain of 17
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
    # Every sample calls each test's first step, and its second unless the run failed there.
    steps = sum(len(t.all_steps) for t in default_suite.tests)
    assert profile["samples"] * len(default_suite.tests) <= result["calls"] <= profile["samples"] * steps
