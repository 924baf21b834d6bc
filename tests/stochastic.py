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

import asyncio
import copy
import json
import math
import random
import re
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

import answers
from scripted import BUDGET_TEST, ScriptedServer, SuiteScript, budget_reply
from starlette.responses import JSONResponse

from gatekeeper.measuring.backends import BackendRequest, MockBackend
from gatekeeper.measuring.level import score_test
from gatekeeper.rules.tiers import Tier, compute_tier
from gatekeeper.suite.loader import CATEGORIES, BenchTest, Suite
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
        if test.name == BUDGET_TEST:  # the tool budget's measurement: not what these models are about
            return budget_reply(messages) or {}
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


# --- models a different checker would write: partial credit, heavy tests, instance-dependent
# and correlated failures, a flaky transport -------------------------------------------------
#
# A `FaultModel` answers like `StochasticModel`, but a failing run answers in one of three ways
# (`MODES`): `empty` as above; `first_step`, the first step perfect and nothing after (a chain
# that stops after step one); `wrong_value`, perfect except the last step, whose answer has one
# value changed (valid JSON with a wrong number, a tool call with a wrong argument, a sentence
# with a word too many). Each costs only some checks of the test: the score a failing run gets,
# `failing_score`, is played as the runner plays it on hundreds of instances and must be the same
# on all of them (else the true score would not be exact, and the model refuses the test).
#
# Whether a run fails: a coin per run (`Behaviour.fail`), or the instance itself
# (`by_instance`: the run fails exactly when the test's key variable, an integer or the first
# declared choice, drawn uniformly by the suite, takes one of the first ceil(fail * size) values
# of its range: the probability is that count over the size, exactly). And, with probability
# `bad_sample`, every test (of `bad_categories`) of the j-th sample fails together, in
# `bad_mode`, so failures within a sample are correlated while samples stay independent (one
# effort level at a time: the j-th group of first calls is the j-th sample). The true score of test t is then exactly
#
#     mu_t = b_t * S_t(bad_mode) + (1 - b_t) * (f_t * S_t(mode_t) + (1 - f_t))
#
# with f_t the failure probability (the coin, or the instance fraction) and S_t a failing score.
# Transport trouble (`server(error_rate=..., latency_s=...)`): a call answered with HTTP 500
# (or delayed) is decided before the model sees it, so it never changes an answer: the runner
# retries it (bench.max_retries) and the true scores stay those of the answers.

MODES = ("empty", "first_step", "wrong_value")


@dataclass(frozen=True)
class Behaviour:
    """How one test's runs fail: how often (`fail`), how (`mode`), and whether the instance decides."""

    fail: float = 0.0
    mode: str = "empty"
    by_instance: bool = False


def _as_answer(message: dict) -> Answer:
    calls = tuple(
        ToolCall(
            c.get("id") or f"call_{i}",
            c["name"],
            c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]),
        )
        for i, c in enumerate(message.get("tool_calls") or [])
    )
    return Answer(message.get("content") or "", calls)


def _wrong(value: object) -> object:
    """One value changed the way a model gets it wrong."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    return value


def _change_first_leaf(doc: object) -> bool:
    """Change the first number (else string) leaf of a JSON document in place; False if none."""
    for wanted in ((int, float), (str,)):
        stack = [doc]
        while stack:
            node = stack.pop(0)
            items = (
                list(node.items())
                if isinstance(node, dict)
                else list(enumerate(node))
                if isinstance(node, list)
                else []
            )
            for key, value in items:
                if isinstance(value, wanted) and not isinstance(value, bool):
                    node[key] = _wrong(value)  # type: ignore[index]
                    return True
                stack.append(value)
    return False


def wrong_value(message: dict) -> dict:
    """The message with one value changed: a tool call's last argument, a JSON answer's first
    number (or string), else a word added to the text."""
    message = copy.deepcopy(message)
    if message.get("tool_calls"):
        arguments = message["tool_calls"][0]["arguments"]
        if arguments:
            last = list(arguments)[-1]
            arguments[last] = _wrong(arguments[last])
        return message
    content = message.get("content") or ""
    try:
        doc = json.loads(content)
    except ValueError:
        doc = None
    if isinstance(doc, dict | list) and _change_first_leaf(doc):
        message["content"] = json.dumps(doc, ensure_ascii=False)
    else:
        message["content"] = content + " extra"
    return message


def failing_step(test: BenchTest, mode: str) -> int:
    """The first step at which a failing run's answer differs from the perfect one."""
    return {"empty": 0, "first_step": 1, "wrong_value": len(test.all_steps) - 1}[mode]


def mode_answer(test: BenchTest, step: int, mode: str) -> dict:
    if mode not in MODES:
        raise ValueError(f"unknown failure mode {mode!r} (expected one of {MODES})")
    if step < failing_step(test, mode):
        return answers.perfect(test, step)
    if mode == "wrong_value":
        return wrong_value(answers.perfect(test, step))
    return dict(EMPTY)


def play(test: BenchTest, respond) -> float:
    """A test's score for the answers `respond` gives, played as the runner plays them."""
    played: list[Answer] = []
    for i, step in enumerate(test.all_steps):
        if i > 0 and step.tool_result is not None and not played[-1].tool_calls:
            break  # the chain is broken
        played.append(_as_answer(respond(i)))
    return score_test(test, played)


def _instances(suite: Suite, name: str, count: int = 300) -> list[BenchTest]:
    if name not in suite.templates:
        return [next(t for t in suite.tests if t.name == name)]
    return [next(t for t in suite.instance(f"exact-{i}", 0) if t.name == name) for i in range(count)]  # type: ignore[arg-type]


def failing_score(suite: Suite, name: str, mode: str) -> float:
    """What a failing run in `mode` scores on test `name`: the same on every instance, or ValueError."""
    if mode not in MODES:
        raise ValueError(f"unknown failure mode {mode!r} (expected one of {MODES})")
    scores = {round(play(t, lambda i, t=t: mode_answer(t, i, mode)), 12) for t in _instances(suite, name)}
    if len(scores) != 1:
        raise ValueError(f"{name}: mode {mode!r} scores {sorted(scores)} depending on the instance: not exact")
    return scores.pop()


def key_variable(suite: Suite, test: BenchTest, mode: str) -> tuple[str, list] | None:
    """The variable an instance-dependent failure reads, and its values in order: the first
    integer variable the conversation has shown by the failing step, else the first declared
    variable if it is a choice shown by then (drawn uniformly: nothing was taken before it)."""
    template = suite.templates.get(test.name)
    if template is None:
        return None
    raw = template.raw
    steps = raw.get("steps") or [{"prompt": raw.get("prompt")}]
    shown = " ".join(
        (s.get("prompt") or "") + " " + (s.get("toolResult") or "") for s in steps[: failing_step(test, mode) + 1]
    )

    def visible(name: str) -> bool:
        return re.search(r"\{\{\s*" + name + r"\s*\}\}", shown) is not None

    for name, spec in template.vars.items():
        if spec.int_range is not None and visible(name):
            lo, hi = spec.int_range
            return name, list(range(lo, hi + 1))
        if spec.is_int and spec.choice is not None and visible(name):
            return name, list(spec.choice)
    first, spec = next(iter(template.vars.items()))
    if spec.choice is not None and visible(first):
        return first, list(spec.choice)
    return None


def instance_failures(suite: Suite, test: BenchTest, behaviour: Behaviour) -> set:
    """The key variable's values on which an instance-dependent run fails."""
    found = key_variable(suite, test, behaviour.mode)
    if found is None:
        raise ValueError(f"{test.name}: no variable the failure could depend on exactly (a fixed test?)")
    _, values = found
    return set(values[: math.ceil(behaviour.fail * len(values) - 1e-9)])


def failure_probability(suite: Suite, test: BenchTest, behaviour: Behaviour) -> float:
    if not behaviour.by_instance:
        return behaviour.fail
    found = key_variable(suite, test, behaviour.mode)
    assert found is not None
    return len(instance_failures(suite, test, behaviour)) / len(found[1])


class FaultModel:
    """A model whose failures take the forms above; its true scores are `true_scores()`."""

    def __init__(
        self,
        suite: Suite,
        behaviours: Mapping[str, Behaviour],
        *,
        bad_sample: float = 0.0,
        bad_categories: tuple[str, ...] = CATEGORIES,
        bad_mode: str = "empty",
        bad_window_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.suite = suite
        self.script = SuiteScript(suite)
        self.behaviours = {t.name: behaviours.get(t.name, Behaviour()) for t in suite.tests}
        self.bad_sample, self.bad_categories, self.bad_mode = bad_sample, bad_categories, bad_mode
        # bad_window_s > 0: the streaks are in time, not calls: every first call made in the j-th
        # window of that many seconds (of the monotonic clock) fails when window j is bad (a
        # backend whose quality drifts; each window bad with probability bad_sample, independently).
        self.bad_window_s = bad_window_s
        self.seed = seed
        # Checked once: every failing score is exact, every instance rule has its variable.
        self._scores = {
            (t.name, mode): failing_score(suite, t.name, mode)
            for t in suite.tests
            for mode in {self.behaviours[t.name].mode, bad_mode}
        }
        self._fails_on = {
            t.name: instance_failures(suite, t, b) for t in suite.tests if (b := self.behaviours[t.name]).by_instance
        }
        self._runs: dict[str, int] = {}
        self._firsts = 0  # first-step calls answered (a measurement's samples are sequential)
        self._decided: dict[str, str] = {}  # run -> "pass" | "fail" | "bad"
        self._lock = threading.Lock()

    def with_seed(self, seed: int) -> FaultModel:
        """The same model, fresh, drawing from another seed (the checks above are not redone)."""
        clone = copy.copy(self)
        clone.seed, clone._runs, clone._decided, clone._lock = seed, {}, {}, threading.Lock()
        clone._firsts = 0
        return clone

    def true_scores(self) -> dict[str, float]:
        scores = {}
        for category in CATEGORIES:
            tests = self.suite.by_category(category)
            total = sum(t.weight for t in tests)
            mean = 0.0
            for t in tests:
                behaviour = self.behaviours[t.name]
                b = self.bad_sample if category in self.bad_categories else 0.0
                f = failure_probability(self.suite, t, behaviour)
                own = f * self._scores[(t.name, behaviour.mode)] + (1 - f)
                mean += t.weight * (b * self._scores[(t.name, self.bad_mode)] + (1 - b) * own)
            scores[category] = mean / total
        return scores

    def message(self, messages: list[dict]) -> dict:
        test, step = self.script.locate({"messages": messages})
        if test.name == BUDGET_TEST:  # the tool budget's measurement: not what these models are about
            return budget_reply(messages) or {}
        behaviour = self.behaviours[test.name]
        with self._lock:
            if step == 0:
                # The runner's samples are sequential and each starts every test once, so the
                # j-th group of len(tests) first calls is the j-th sample: its latent is drawn
                # from j. (Not from each test's own run count: sentence_counted_random can draw
                # exactly sentence_seven_words' prompt, and a count per located test would then
                # shift one test's latent onto the next sample, making samples dependent.)
                # Under the adaptive design the groups are runs of consecutive first calls: a
                # model failing in streaks (docs/statistics.md).
                k = self._runs[test.name] = self._runs.get(test.name, -1) + 1
                j, self._firsts = self._firsts // len(self.suite.tests), self._firsts + 1
                if self.bad_window_s:
                    j = int(time.monotonic() // self.bad_window_s)
                bad = test.category in self.bad_categories and (
                    random.Random(f"{self.seed}/bad-sample/{j}").random() < self.bad_sample
                )
                coin = random.Random(f"{self.seed}/{test.name}/{k}").random() < behaviour.fail
                run = f"r{self._firsts}"
                self._decided[run] = "bad" if bad else "fail" if coin else "pass"
            else:
                # The run is named in the ids of the calls it made (two runs of one fixed test
                # may be in flight at once: their conversations are alike until then).
                previous = next(m for m in reversed(messages) if m["role"] == "assistant")
                run = str((previous.get("tool_calls") or [{}])[0].get("id", "")).split("_")[1]
            decided = self._decided[run]
        return _named(self._answer(test, step, behaviour, decided), run)

    def _answer(self, test: BenchTest, step: int, behaviour: Behaviour, decided: str) -> dict:
        if decided == "bad":
            return mode_answer(test, step, self.bad_mode)
        if behaviour.by_instance:
            found = key_variable(self.suite, test, behaviour.mode)
            assert found is not None
            fails = test.bindings[found[0]] in self._fails_on[test.name]
        else:
            fails = decided == "fail"
        return mode_answer(test, step, behaviour.mode) if fails else answers.perfect(test, step)

    def backend(self) -> MockBackend:
        return MockBackend(lambda request: _as_answer(self.message(request.messages)))

    def server(self, error_rate: float = 0.0, latency_s: tuple[float, float] = (0.0, 0.0)) -> FlakyServer:
        return FlakyServer(lambda body: self.message(body["messages"]), error_rate, latency_s, self.seed)


def _named(message: dict, run: str) -> dict:
    """The message with its tool calls' ids naming the run (call_<run>_<i>)."""
    for i, call in enumerate(message.get("tool_calls") or []):
        call["id"] = f"call_{run}_{i}"
    return message


class FlakyServer(ScriptedServer):
    """The scripted server with a transport that fails or dawdles: each call, before the model
    sees it, is answered HTTP 500 with probability `error_rate`, and delayed uniformly within
    `latency_s`. A failed call never reaches the model, so the true scores are unchanged."""

    def __init__(self, responder, error_rate: float, latency_s: tuple[float, float], seed: int) -> None:
        self.error_rate, self.latency_s = error_rate, latency_s
        self._rng = random.Random(f"{seed}/transport")
        self.errors = 0
        super().__init__(responder)

    async def _chat(self, request):
        draw, pause = self._rng.random(), self._rng.uniform(*self.latency_s)
        if pause:
            await asyncio.sleep(pause)
        if draw < self.error_rate:
            self.errors += 1
            return JSONResponse({"error": {"message": "scripted outage", "type": "server_error"}}, status_code=500)
        return await super()._chat(request)


# A llama.cpp server in front of the model: a tool call the model gets wrong is one the server
# cannot parse, and the call comes back HTTP 500 "Failed to parse input at pos N: ..." instead of
# an answer (ggml-org/llama.cpp#20761). That error is the model's failure: measured as the empty
# answer it stands for, the true scores are the FaultModel's; retried, it would be resampled
# until the model got lucky.

UNPARSED_BODY = {
    "error": {"code": 500, "message": "Failed to parse input at pos 12: <tool_call>", "type": "server_error"}
}


class UnparsedCalls:
    """A FaultModel whose failing runs, at a step where the perfect answer is a tool call, come
    back as llama.cpp's HTTP 500 (in process through the real OpenAIBackend over an httpx
    MockTransport, or over HTTP). Its true scores are the FaultModel's."""

    def __init__(self, model: FaultModel) -> None:
        self.model = model
        self.unparsed = 0  # calls answered with the 500

    def with_seed(self, seed: int) -> UnparsedCalls:
        return UnparsedCalls(self.model.with_seed(seed))

    def true_scores(self) -> dict[str, float]:
        return self.model.true_scores()

    def reply(self, messages: list[dict]) -> dict:
        """The model's message, or `{"status": 500, "error": ...}` where its tool call failed."""
        message = self.model.message(messages)
        test, step = self.model.script.locate({"messages": messages})
        if not (message.get("content") or message.get("tool_calls")) and answers.perfect(test, step)["tool_calls"]:
            self.unparsed += 1
            return {"status": 500, "error": UNPARSED_BODY["error"]["message"]}
        return message

    def backend(self):
        import httpx

        from gatekeeper.measuring.backends import OpenAIBackend, RequestSettings

        def handle(request: httpx.Request) -> httpx.Response:
            reply = self.reply(json.loads(request.content)["messages"])
            if "status" in reply:
                return httpx.Response(reply["status"], json=UNPARSED_BODY)
            calls = [
                {
                    "id": c.get("id") or f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                }
                for i, c in enumerate(reply.get("tool_calls") or [])
            ]
            message = {"role": "assistant", "content": reply.get("content")} | ({"tool_calls": calls} if calls else {})
            doc = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}]}
            return httpx.Response(200, json=doc | {"usage": {"completion_tokens": 7}})

        return OpenAIBackend(
            "http://model.invalid/v1", settings=RequestSettings(backoff_s=0.0), transport=httpx.MockTransport(handle)
        )

    def server(self, **transport: object) -> ScriptedServer:
        return ScriptedServer(lambda body: self.reply(body["messages"]))
