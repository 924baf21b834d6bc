"""How often a stored tier is too high, against a model whose true scores are known exactly.

The models (tests/stochastic.py) fail in known ways, so every category's true score, and the
true tier, are known exactly. The first four scenarios pass each test run with a chosen
probability and otherwise answer nothing; the others are what a different checker would write:
failures that cost only some checks (partial credit), failures concentrated on the heaviest
test, failures decided by the drawn instance, failures in streaks (every run of the k-th group
of 19 first calls, a whole sample under `bench.design: whole`, fails together), scores just
under and just over a threshold, a transport that errors (HTTP 500) and dawdles, and a server
that answers the model's failed tool calls with HTTP 500 `Failed to parse input` (`unparsed`).
Each scenario is measured many times in-process (the real runner and bounds through a
MockBackend) and a few dozen times through the real `gatekeeper bench` CLI against the model
served over HTTP, at the default settings unless told otherwise. Printed per scenario: the true
scores and tier, how often the stored tier was too high (and too low), how often `large` was
certified, how often each stored lower bound sat at or under the true score (per category and
all three at once), and the upstream calls one measurement of one level made.

    .venv/bin/python scripts/simulate_confidence.py                    # 200 in-process + 30 CLI
    .venv/bin/python scripts/simulate_confidence.py --inprocess 50 --cli 0 --scenario chain
    .venv/bin/python scripts/simulate_confidence.py --cli 0 --design whole --scenario correlated
    .venv/bin/python scripts/simulate_confidence.py --cli 0 --design spaced --spacing 0.06 --scenario drifting
    .venv/bin/python scripts/simulate_confidence.py --inprocess 0 --cli 0 --sweeps 10 --scenario perfect
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import answers  # noqa: E402
from scripted import ScriptedServer, SuiteScript  # noqa: E402
from stochastic import (  # noqa: E402
    Behaviour,
    FaultModel,
    StochasticModel,
    UnparsedCalls,
    failing_score,
    pass_probabilities,
    true_scores,
)

from gatekeeper.config import Settings  # noqa: E402
from gatekeeper.measuring.backends import MockBackend  # noqa: E402
from gatekeeper.measuring.runner import RunSettings, category_scores, run_test, sweep  # noqa: E402
from gatekeeper.observe import logs  # noqa: E402
from gatekeeper.rules.tiers import Tier, compute_tier  # noqa: E402
from gatekeeper.suite.loader import CATEGORIES, DEFAULT_SUITE_DIR, Suite, load_suite  # noqa: E402
from gatekeeper.types import Answer, ToolCall  # noqa: E402

Targets = Callable[[Suite], dict[str, float]]


class Coins:
    """The first scenarios' model (tests/stochastic.py's StochasticModel) with its true scores."""

    def __init__(self, suite: Suite, probabilities: dict[str, float], seed: int = 0) -> None:
        self.suite, self.probabilities, self.seed = suite, probabilities, seed
        self.model = StochasticModel(suite, probabilities, seed)

    def with_seed(self, seed: int) -> Coins:
        return Coins(self.suite, self.probabilities, seed)

    def true_scores(self) -> dict[str, float]:
        return true_scores(self.suite, self.probabilities)

    def backend(self) -> Any:
        return self.model.backend()

    def server(self, **transport: Any) -> Any:
        return self.model.server()


class Persona:
    """A deterministic scripted model (tests/answers.py): the same answer to the same prompt,
    so its true scores are one pass of the seed's scoring, exactly."""

    def __init__(self, suite: Suite, behaviour: str) -> None:
        self.suite, self.behaviour = suite, behaviour

    def with_seed(self, seed: int) -> Persona:
        return self

    def true_scores(self) -> dict[str, float]:
        backend = self.backend()
        runs = [asyncio.run(run_test(backend, "m", t, None, RunSettings())) for t in self.suite.tests]
        return category_scores([(run.test, run.score()) for run in runs])

    def backend(self) -> Any:
        script, behaviour = SuiteScript(self.suite), answers.BEHAVIOURS[self.behaviour]

        def handle(request: Any) -> Answer:
            message = behaviour(*script.locate({"messages": request.messages}))
            calls = tuple(
                ToolCall(f"call_{i}", c["name"], json.dumps(c["arguments"]))
                for i, c in enumerate(message["tool_calls"])
            )
            return Answer(message["content"] or "", calls)

        return MockBackend(handle)

    def server(self, **transport: Any) -> Any:
        return ScriptedServer(SuiteScript(self.suite).responder(answers.BEHAVIOURS[self.behaviour]))


def per_category(instruction: float, json_: float, tool_calling: float) -> Targets:
    by = {"instruction": instruction, "json": json_, "toolCalling": tool_calling}
    return lambda suite: {t.name: by[t.category] for t in suite.tests}


def one_chain_coin_flip(suite: Suite) -> dict[str, float]:
    # 3 in 10, not half: half the time left toolCalling at 0.88 of 17 but leaves 0.91 (large) of
    # the 23 it weighs since issue 41; 0.3 keeps the hard case just under large (0.878).
    return {t.name: 0.3 if t.name == "tool_chain_distractor_ids" else 1.0 for t in suite.tests}


def coins(targets: Targets) -> Callable[[Suite], Coins]:
    return lambda suite: Coins(suite, pass_probabilities(suite, targets(suite)))


def spread(mode: str, **by: float) -> Callable[[Suite], FaultModel]:
    """Every test of a category that `mode` can fail fails with one probability, chosen so that
    the category's true score is `by[category]` (instruction, json, toolCalling)."""

    def make(suite: Suite) -> FaultModel:
        behaviours = {}
        for category, target in by.items():
            tests = suite.by_category(category)
            total = sum(t.weight for t in tests)
            cost = {t.name: 1 - failing_score(suite, t.name, mode) for t in tests}
            f = (1 - target) / sum(t.weight / total * cost[t.name] for t in tests)
            if f > 1:
                raise ValueError(f"{category}: {mode} failures cannot bring it down to {target}")
            behaviours |= {t.name: Behaviour(f, mode) for t in tests if cost[t.name] > 0}
        return FaultModel(suite, behaviours)

    return make


def heaviest(mode: str, **by: float) -> Callable[[Suite], FaultModel]:
    """Only each category's heaviest test (the first of equals) fails, as often as it takes."""

    def make(suite: Suite) -> FaultModel:
        behaviours = {}
        for category, target in by.items():
            tests = suite.by_category(category)
            total = sum(t.weight for t in tests)
            heavy = max(tests, key=lambda t: t.weight)
            cost = heavy.weight / total * (1 - failing_score(suite, heavy.name, mode))
            behaviours[heavy.name] = Behaviour((1 - target) / cost, mode)
        return FaultModel(suite, behaviours)

    return make


def by_instance(fraction: dict[str, float], mode: str = "empty") -> Callable[[Suite], FaultModel]:
    """Every randomised test with a variable to read fails on the first `fraction[category]` of
    that variable's values (fixed tests always pass): the instance decides, not a coin."""

    def make(suite: Suite) -> FaultModel:
        from stochastic import key_variable

        behaviours = {
            t.name: Behaviour(fraction[t.category], mode, by_instance=True)
            for t in suite.tests
            if key_variable(suite, t, mode) is not None and t.category in fraction
        }
        return FaultModel(suite, behaviours)

    return make


def correlated(tool_calling: float, window_s: float = 0.0) -> Callable[[Suite], FaultModel]:
    """Every test of the k-th sample fails together (empty answers) with one probability, chosen
    so that toolCalling's true score is `tool_calling`; the other categories follow. With
    `window_s`, every first call of the k-th window of that many seconds instead."""

    def make(suite: Suite) -> FaultModel:
        tests = suite.by_category("toolCalling")
        total = sum(t.weight for t in tests)
        lost = sum(t.weight / total * (1 - failing_score(suite, t.name, "empty")) for t in tests)
        return FaultModel(suite, {}, bad_sample=(1 - tool_calling) / lost, bad_window_s=window_s)

    return make


@dataclass(frozen=True)
class Scenario:
    label: str
    make: Callable[[Suite], Any]  # -> a model with with_seed, true_scores, backend, server
    transport: dict[str, Any] = field(default_factory=dict)  # FlakyServer's error_rate, latency_s
    cli_only: bool = False  # the transport's trouble is met only over HTTP


def always_failing(*names: str) -> Callable[[Suite], FaultModel]:
    """A deterministic model: these tests always fail (empty answers), every other always passes."""
    return lambda suite: FaultModel(suite, {name: Behaviour(1.0) for name in names})


def unparsed(make: Callable[[Suite], FaultModel]) -> Callable[[Suite], UnparsedCalls]:
    """`make`'s model behind a llama.cpp server: its failing tool calls come back HTTP 500
    `Failed to parse input at pos N` (the real OpenAIBackend reads them, in process too)."""
    return lambda suite: UnparsedCalls(make(suite))


SCENARIOS: dict[str, Scenario] = {
    "perfect": Scenario("passes every check", coins(per_category(1.0, 1.0, 1.0))),
    "medium": Scenario("0.97/0.97/0.88 (every test at its category's score)", coins(per_category(0.97, 0.97, 0.88))),
    "chain": Scenario("one weight-4 chain passing 3 runs in 10 (1/1/0.88)", coins(one_chain_coin_flip)),
    "large99": Scenario("clearly large: 0.99 everywhere", coins(per_category(0.99, 0.99, 0.99))),
    "large98": Scenario("the power target: 0.98 everywhere", coins(per_category(0.98, 0.98, 0.98))),
    "partial": Scenario(
        "partial credit: one value wrong (0.97/0.97/0.88)",
        spread("wrong_value", instruction=0.97, json=0.97, toolCalling=0.88),
    ),
    "partial98": Scenario(
        "partial credit at 0.98: one value wrong", spread("wrong_value", instruction=0.98, json=0.98, toolCalling=0.98)
    ),
    "heavy98": Scenario(
        "0.98 from the heaviest test of each category failing whole",
        heaviest("empty", instruction=0.98, json=0.98, toolCalling=0.98),
    ),
    "stops98": Scenario(
        "0.98 toolCalling from the weight-4 chain stopping after step one",
        heaviest("first_step", toolCalling=0.98),
    ),
    "instance": Scenario(
        "the instance decides: a fifth of each variable's values fail (tool), a tenth (others)",
        by_instance({"instruction": 0.1, "json": 0.1, "toolCalling": 0.2}),
    ),
    "correlated": Scenario(
        "streaks of 22 first calls (a whole sample) fail together, toolCalling 0.88", correlated(0.88)
    ),
    "drifting": Scenario(
        "every first call in a bad 50 ms window fails (a backend that drifts), toolCalling 0.88",
        correlated(0.88, window_s=0.05),
    ),
    "correlated98": Scenario(
        "streaks of 22 first calls (a whole sample) fail together, toolCalling 0.98", correlated(0.98)
    ),
    "tool65": Scenario(
        "deterministic, toolCalling 15/23 (both weight-4 chains always fail), 1.0 elsewhere",
        always_failing("tool_chain_distractor_ids", "tool_chain_random_ids"),
    ),
    "under": Scenario("just under large in each category: 0.845/0.845/0.895", coins(per_category(0.845, 0.845, 0.895))),
    "over": Scenario("just over large in each category: 0.855/0.855/0.905", coins(per_category(0.855, 0.855, 0.905))),
    "under_medium": Scenario(
        "just under medium: 0.9/0.495/0.595", spread("empty", instruction=0.9, json=0.495, toolCalling=0.595)
    ),
    "unparsed": Scenario(
        "failing tool calls come back HTTP 500 'Failed to parse input' (0.98/0.98/0.88)",
        unparsed(spread("empty", instruction=0.98, json=0.98, toolCalling=0.88)),
    ),
    "distracted": Scenario(
        "deterministic: a distractor id in each chain, a call in the abstention trap (seed suite: toolCalling 0.65)",
        lambda suite: Persona(suite, "distracted"),
    ),
    "flaky98": Scenario(
        "0.98 everywhere behind a transport: 10% HTTP 500, 0-20 ms latency",
        spread("empty", instruction=0.98, json=0.98, toolCalling=0.98),
        transport={"error_rate": 0.1, "latency_s": (0.0, 0.02)},
        cli_only=True,
    ),
    "flaky": Scenario(
        "0.97/0.97/0.88 behind the same transport",
        spread("empty", instruction=0.97, json=0.97, toolCalling=0.88),
        transport={"error_rate": 0.1, "latency_s": (0.0, 0.02)},
        cli_only=True,
    ),
}


@dataclass
class Tally:
    n: int = 0
    too_high: int = 0
    too_low: int = 0
    large: int = 0
    under: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CATEGORIES, 0))
    all_under: int = 0
    calls: list[int] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)
    failed: int = 0  # measurements that stored nothing (the backend failed past its retries)

    def add(self, tier: Tier, intervals: dict[str, list[float]], truth: dict[str, float], calls: int, n: int) -> None:
        self.n += 1
        self.too_high += tier.rank > compute_tier(truth).rank
        self.too_low += tier.rank < compute_tier(truth).rank
        self.large += tier == Tier.LARGE
        under = {c: intervals[c][0] <= truth[c] for c in CATEGORIES}
        for c, ok in under.items():
            self.under[c] += ok
        self.all_under += all(under.values())
        self.calls.append(calls)
        self.samples.append(n)

    def row(self, label: str) -> str:
        if not self.n:
            return f"  {label:<10} every measurement failed ({self.failed})"
        pct = lambda k: f"{100 * k / self.n:5.1f}%"  # noqa: E731
        unders = " ".join(f"{c[:4]} {pct(self.under[c])}" for c in CATEGORIES)
        return (
            f"  {label:<10} n={self.n:<4} too high {pct(self.too_high)}  too low {pct(self.too_low)}  "
            f"large {pct(self.large)}  "
            f"bound <= truth: {unders}, all {pct(self.all_under)}  "
            f"calls {statistics.mean(self.calls):.0f} (p90 {sorted(self.calls)[int(0.9 * (self.n - 1))]}, "
            f"max {max(self.calls)}), samples {statistics.mean(self.samples):.1f}"
            + (f"; {self.failed} stored nothing (backend failed)" if self.failed else "")
        )


def run_inprocess(model: Any, count: int, settings: RunSettings, suite: Suite) -> Tally:
    truth, tally = model.true_scores(), Tally()
    for i in range(count):
        seeded = model.with_seed(i)
        measured = asyncio.run(sweep(seeded.backend(), "m", suite, ["default"], settings, seed=i))
        (profile,) = measured.profiles
        tally.add(profile.tier, profile.score_intervals or {}, truth, measured.calls, profile.samples or 1)
    return tally


def run_cli(model: Any, count: int, extra: list[str], transport: dict[str, Any]) -> Tally:
    truth, tally = model.true_scores(), Tally()
    with model.with_seed(12345).server(**transport) as server, tempfile.TemporaryDirectory() as tmp:
        for i in range(count):
            done = subprocess.run(
                [sys.executable, "-m", "gatekeeper", "bench", "m", "--effort", "default", "--json"]
                + ["--base-url", server.base_url, "--store", f"{tmp}/{i}.json", *extra],
                capture_output=True,
                text=True,
                timeout=1800,
                cwd=ROOT,
                env=os.environ | {"PYTHONPATH": str(ROOT)},
            )
            if done.returncode != 0:
                tally.failed += 1  # nothing stored: counted, never as a tier
                continue
            (result,) = json.loads(done.stdout)["results"]
            (profile,) = result["profiles"]
            tally.add(Tier(profile["tier"]), profile["scoreIntervals"], truth, result["calls"], profile["samples"])
    return tally


def ever_above(suite: Suite, runs: int, risk: float, samples: int = 200) -> None:
    """The bound's worst case, without the runner: every test of a sample fails together (the
    `correlated` model's shares), and the question is how often each category's lower bound at
    level `risk` rises above the truth at *some* sample count up to `samples` (what Ville's
    inequality bounds by `risk`), and how often one of the three does."""
    import random

    from gatekeeper.measuring.confidence import estimate

    model = SCENARIOS["correlated"].make(suite)
    lost = {
        c: sum(
            t.weight / sum(u.weight for u in suite.by_category(c)) * (1 - failing_score(suite, t.name, "empty"))
            for t in suite.by_category(c)
        )
        for c in CATEGORIES
    }
    truth, bad = model.true_scores(), model.bad_sample
    per, anywhere = dict.fromkeys(CATEGORIES, 0), 0
    for r in range(runs):
        rng, failed, above = random.Random(r), 0, set()
        for n in range(1, samples + 1):
            failed += rng.random() < bad
            for c in set(CATEGORIES) - above:
                if estimate([lost[c]] * failed + [0.0] * (n - failed), risk).low > truth[c]:
                    above.add(c)
        anywhere += bool(above)
        for c in above:
            per[c] += 1
    shown = ", ".join(f"{c} {100 * k / runs:.1f}%" for c, k in per.items())
    print(
        f"whole samples failing (p {bad:.3f}), level {risk:g}, {runs} runs of {samples}: ever above: {shown}; "
        f"any of the three {100 * anywhere / runs:.1f}%"
    )


def run_sweeps(model: Any, count: int, settings: RunSettings, suite: Suite) -> None:
    """`count` five-level sweeps (`default,none,low,medium,xhigh`, the CLI's default) with and
    without --recommend-only: the calls one measurement of the model makes."""
    from dataclasses import replace

    from gatekeeper.measuring.runner import DEFAULT_EFFORTS

    for only in (True, False):
        calls, skipped = [], []
        for i in range(count):
            every = replace(settings, recommend_only=only)
            measured = asyncio.run(
                sweep(model.with_seed(i).backend(), "m", suite, list(DEFAULT_EFFORTS), every, seed=i)
            )
            calls.append(measured.calls)
            skipped.append(len(measured.skipped))
        print(
            f"  five levels, recommend-only {only!s:<5} n={count}: calls {statistics.mean(calls):.0f} "
            f"(max {max(calls)}), levels skipped {statistics.mean(skipped):.1f}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--inprocess", type=int, default=200, help="in-process measurements per scenario")
    parser.add_argument("--cli", type=int, default=30, help="measurements through `gatekeeper bench` per scenario")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="default: all")
    parser.add_argument("--samples", type=int, help="bench.samples (default: the config default)")
    parser.add_argument("--risk", type=float, help="bench.risk (default: the config default)")
    parser.add_argument(
        "--design", choices=("adaptive", "whole", "spaced"), help="bench.design (default: the config default)"
    )
    parser.add_argument("--spacing", type=float, help="bench.spacing_s under --design spaced (default: the config's)")
    parser.add_argument("--suite", type=Path, default=DEFAULT_SUITE_DIR, help="the suite (default: benchmarks/)")
    parser.add_argument("--sweeps", type=int, default=0, help="five-level sweeps with and without --recommend-only")
    parser.add_argument(
        "--ever",
        type=int,
        metavar="RUNS",
        help="only the bound's worst case (docs/statistics.md), at 0.05 and 0.05 / 3",
    )
    args = parser.parse_args()
    logs.configure("warning", json=False)

    suite = load_suite(args.suite)
    if args.ever:
        for level in (0.05, 0.05 / 3):
            ever_above(suite, args.ever, level)
        return
    bench = Settings().bench
    samples, risk = args.samples or bench.samples, args.risk or bench.risk
    design = args.design or bench.design
    spacing = bench.spacing_s if args.spacing is None else args.spacing
    settings = RunSettings(samples=samples, risk=risk, thresholds=bench.thresholds, design=design, spacing_s=spacing)
    extra = [
        *(["--samples", str(args.samples)] if args.samples else []),
        *(["--spacing", str(spacing)] if design == "spaced" else []),
        "--design",
        design,
        "--suite",
        str(args.suite),
    ]
    if args.risk and args.cli:
        raise SystemExit("--risk applies in-process only (the CLI reads bench.risk from a config file): add --cli 0")
    print(
        f"suite {suite.hash} ({len(suite.tests)} tests), bench.samples {samples}, bench.risk {risk}, bench.design {design}"
        + (f", bench.spacing_s {spacing}" if design == "spaced" else "")
    )
    for name in args.scenario or list(SCENARIOS):
        scenario = SCENARIOS[name]
        model = scenario.make(suite)
        truth = model.true_scores()
        shown = "/".join(f"{truth[c]:.4f}" for c in CATEGORIES)
        print(f"{name}: {scenario.label}; true instruction/json/toolCalling {shown} -> {compute_tier(truth).value}")
        if args.sweeps:
            run_sweeps(model, args.sweeps, settings, suite)
        for where, count in (("in-process", args.inprocess), ("CLI", args.cli)):
            if count and not (where == "in-process" and scenario.cli_only):
                started = time.perf_counter()
                if where == "CLI":
                    tally = run_cli(model, count, extra, scenario.transport)
                else:
                    tally = run_inprocess(model, count, settings, suite)
                print(tally.row(where) + f"  ({time.perf_counter() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
