"""A stochastic model whose true scores are known exactly, as a real HTTP server or in-process.

Each run of a test passes with that test's probability: the model then gives the perfect answer
at every step (tests/answers.py). Otherwise it gives the empty answer (no text, no call) at every
step it reaches, which scores `s0` on that test (checks such as `tool_not_called` still pass; a
chain stops after its first step). So test t's true expected score is

    mu_t = p_t + (1 - p_t) * s0_t

and a category's true score is the weighted mean of its tests' mu_t: `true_scores`. A scenario
names target test scores; `pass_probabilities` turns them into the p_t that realise them.
The decision is taken at a run's first step and read back from the conversation at later steps
(an empty previous answer means the run failed), so a run never half passes. The k-th run of a
test draws from (seed, test, k): samples run one after the other, so the same seed gives the
same answers however the calls of one sample interleave over HTTP.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Mapping

import answers
from scripted import ScriptedServer, SuiteScript

from gatekeeper.measuring.backends import BackendRequest, MockBackend
from gatekeeper.measuring.runner import score_test
from gatekeeper.suite.loader import CATEGORIES, BenchTest, Suite
from gatekeeper.tiers import Tier, compute_tier
from gatekeeper.types import Answer, ToolCall

EMPTY: dict = {"content": "", "tool_calls": []}


def empty_score(test: BenchTest) -> float:
    """What the empty answer scores on `test`, played as the runner plays it."""
    reached = 1
    for step in test.all_steps[1:]:
        if step.tool_result is not None:
            break  # no tool call to answer: the chain is broken
        reached += 1
    return score_test(test, [Answer("", ())] * reached)


def pass_probabilities(suite: Suite, targets: Mapping[str, float]) -> dict[str, float]:
    """Test name -> the pass probability giving that test the target expected score."""
    found = {}
    for test in suite.tests:
        s0 = empty_score(test)
        target = targets[test.name]
        if target < s0:
            raise ValueError(f"{test.name}: target {target} is below the empty answer's score {s0}")
        found[test.name] = 1.0 if s0 >= 1 else (target - s0) / (1 - s0)
    return found


def true_scores(suite: Suite, probabilities: Mapping[str, float]) -> dict[str, float]:
    """Each category's true score: the weighted mean of p_t + (1 - p_t) s0_t."""
    scores = {}
    for category in CATEGORIES:
        tests = suite.by_category(category)
        total = sum(t.weight for t in tests)
        scores[category] = (
            sum(t.weight * (probabilities[t.name] + (1 - probabilities[t.name]) * empty_score(t)) for t in tests)
            / total
        )
    return scores


def true_tier(suite: Suite, probabilities: Mapping[str, float]) -> Tier:
    return compute_tier(true_scores(suite, probabilities))


class StochasticModel:
    """Answers suite conversations: perfect with the test's probability, else empty."""

    def __init__(self, suite: Suite, probabilities: Mapping[str, float], seed: int = 0) -> None:
        self.script = SuiteScript(suite)
        self.probabilities = dict(probabilities)
        self.seed = seed
        self._runs: dict[str, int] = {}
        self._lock = threading.Lock()  # the HTTP server answers from several threads

    def message(self, messages: list[dict]) -> dict:
        test, step = self.script.locate({"messages": messages})
        if step == 0:
            with self._lock:
                k = self._runs[test.name] = self._runs.get(test.name, -1) + 1
            passes = random.Random(f"{self.seed}/{test.name}/{k}").random() < self.probabilities[test.name]
        else:
            previous = next(m for m in reversed(messages) if m["role"] == "assistant")
            passes = bool(previous.get("content") or previous.get("tool_calls"))
        return answers.perfect(test, step) if passes else dict(EMPTY)

    def backend(self) -> MockBackend:
        def handle(request: BackendRequest) -> Answer:
            message = self.message(request.messages)
            calls = tuple(
                ToolCall(f"call_{i}", c["name"], json.dumps(c["arguments"]))
                for i, c in enumerate(message["tool_calls"])
            )
            return Answer(message["content"] or "", calls)

        return MockBackend(handle)

    def server(self) -> ScriptedServer:
        return ScriptedServer(lambda body: self.message(body["messages"]))
