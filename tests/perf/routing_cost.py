"""What capability routing costs on the request path. Not a test: run it by hand.

    python tests/perf/routing_cost.py [--requests 2000] [--tools 3] [--rounds 25]

Measures, in one process with a seeded JSON store (memory-cached, as the proxy reads it):
  * the pure decision (`gatekeeper.core.route_choice.choose_route`) over plain data: decisions per second;
  * the request step without and with a `routing:` section, for a Chat Completions body at
    `low` whose tools need `medium` (so every request is escalated): parse + resolve + gate, and
    parse + resolve + route (dry gate, decision, rewrite) + gate. Their difference is what routing
    adds to a request, in microseconds;
  * the same with the asked pair already admitting the tools (the common, unrouted case), and
    for a body without tools (never routed);
  * the dry gate alone (`Router.need_of_body`: the codec's gate with a policy that records the
    tools it is asked about), the part of the routed request step that reads the tools' needs.
Times are the calling thread's CPU time (`time.thread_time`), so the other processes of a shared
machine do not count. The two arms of a comparison run interleaved, round after round, and each
figure is the fastest round of its arm (each round times `--requests` calls and divides).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gatekeeper import Gatekeeper, JsonFileStore, Profile, Settings
from gatekeeper.core.route_choice import Need, RoutingRules, choose_route
from gatekeeper.observe.logs import configure as configure_logs
from gatekeeper.protocols import table
from gatekeeper.rules.requirements import Capability
from gatekeeper.rules.tiers import Tier
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite

CHAT = table.codec("chat")
assert CHAT is not None


def profile(model: str, effort: str, tier: Tier, suite: Any) -> Profile:
    score = {Tier.SMALL: 0.2, Tier.MEDIUM: 0.7, Tier.LARGE: 1.0}[tier]
    return Profile(
        model=model,
        provider="openai-compatible",
        tier=tier,
        scores={"instruction": score, "json": score, "toolCalling": score},
        score_intervals={c: [score - 0.05, min(score + 0.05, 1.0)] for c in ("instruction", "json", "toolCalling")},
        tokens_per_second=40.0,
        tested_at=datetime.now(UTC).isoformat(),
        benchmark_version=suite.version,
        tests_hash=suite.hash,
        reasoning_effort=effort,
    )


def body(effort: str, tools: int) -> dict[str, Any]:
    names = (["write_file"] + [f"read_{i}" for i in range(tools - 1)]) if tools else []
    return {
        "model": "bench-model",
        "reasoning_effort": effort,
        "messages": [{"role": "user", "content": f"message {i}"} for i in range(10)],
        "tools": [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
            for n in names
        ],
    }


def timed_us(fn: Callable[[], object], n: int) -> float:
    # CPU time of this thread, not wall time: on a shared machine the wall clock also counts the
    # time other processes held the CPU, which is not what the request path costs.
    start = time.thread_time()
    for _ in range(n):
        fn()
    return (time.thread_time() - start) / n * 1e6


def interleaved_us(arms: list[Callable[[], object]], n: int, rounds: int) -> list[float]:
    """The fastest round of each arm, the arms run one after another in every round."""
    best = [float("inf")] * len(arms)
    for _ in range(rounds):
        for i, arm in enumerate(arms):
            best[i] = min(best[i], timed_us(arm, n))
    return best


def decision_rate(n: int, rounds: int) -> float:
    pairs = {
        "m@low": Capability(Tier.SMALL, {"json": 0.3}),
        "m@medium": Capability(Tier.MEDIUM, {"json": 0.6}),
        "m@high": Capability(Tier.LARGE, {"json": 0.95}),
    }
    rules = RoutingRules(fallback=(("gemma-*", ("big",)),))
    need = Need(Tier.LARGE, {"json": 0.9})
    asked = pairs["m@low"]

    def one() -> object:
        return choose_route("m", "low", need, asked, rules, lambda m, e: pairs.get(f"{m}@{e}"))

    return 1e6 / interleaved_us([one], n, rounds)[0]


def request_step(gk: Gatekeeper, effort: str, tools: int, route: bool) -> Callable[[], object]:
    template = body(effort, tools)

    def step() -> object:
        request = dict(template)  # the body is rewritten in place: a fresh top level each time
        if template["tools"]:
            request["tools"] = list(template["tools"])
        else:
            del request["tools"]
        if route:
            chosen = gk.route_body(CHAT, request)  # parse, resolve, dry gate, choose_route, rewrite
            return CHAT.gate(request, chosen.resolution.tier, chosen.policy)
        info = CHAT.parse(request)
        asked = gk.resolve(info.model, info.effort)
        return CHAT.gate(request, asked.tier, gk.policy_for(asked))

    return step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=2000, help="calls per round")
    parser.add_argument("--tools", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=25)
    args = parser.parse_args()
    configure_logs("warning")
    suite = load_suite(DEFAULT_SUITE_DIR)

    print(f"choose_route(): {decision_rate(args.requests * 5, args.rounds):,.0f} decisions/s (pure, plain data)")
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "models_profile.json"
        JsonFileStore(store).save(
            [
                profile("bench-model", "low", Tier.SMALL, suite),
                profile("bench-model", "medium", Tier.MEDIUM, suite),
                profile("bench-model", "high", Tier.LARGE, suite),
            ]
        )
        base = {"store": str(store), "tools": {"required_tier": {"write_*": "medium"}}}
        plain = Gatekeeper(Settings.model_validate(base), suite=suite)
        routing = Gatekeeper(Settings.model_validate(base | {"routing": {}}), suite=suite)
        try:
            for effort, what, tools in (
                ("low", "escalated", args.tools),
                ("medium", "already admitted", args.tools),
                ("low", "no tools: never routed", 0),
            ):
                without, with_routing = interleaved_us(
                    [request_step(plain, effort, tools, False), request_step(routing, effort, tools, True)],
                    args.requests,
                    args.rounds,
                )
                print(
                    f"request at {effort} ({what}, {tools} tools): {without:.1f} us without routing, "
                    f"{with_routing:.1f} us with routing: +{with_routing - without:.1f} us per request"
                )
            template = body("low", args.tools)
            router = routing.snapshot().router

            def dry_gate() -> object:  # what reads the tools' needs: a gate with a recording policy
                request = dict(template)
                request["tools"] = list(template["tools"])
                return router.need_of_body(CHAT, request)

            (dry,) = interleaved_us([dry_gate], args.requests, args.rounds)
            print(f"of which the dry gate that reads the needs of {args.tools} tools: {dry:.1f} us")
        finally:
            plain.close()
            routing.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
