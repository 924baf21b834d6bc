"""Live drift through the real proxy: official openai clients -> `gatekeeper` proxy -> a scripted
upstream whose tool-call fault rates change over time.

The pair `agent-model@default` starts measured `large` (its profile is in a fresh store). Each
answer carries one call to `read_file` (offered at every tier); a faulty call is an invented tool
(notOffered), arguments that are not JSON (invalidJson) or a `path` that is not a string
(invalidArgs), at rates the script sets per phase and per client (API key). Every request is
sent, then the drift worker's queue is drained (`gk.drift.drain()`, what the worker does every
0.25 s), so the figures count calls, not timing. Scenarios (default settings, `large` ceilings
2% / 1% / 2%):

  healthy   4 clients, every rate at 0.9x its ceiling: answers served demoted (should be none)
  fault     1 client: invalidArgs at 5x (10%); calls until it is served demoted, the share of the
            fault's answers served `large` after that, then calls of clean traffic until `large`
  spread    3 clients at 5x together: calls until everyone is demoted (a 4th client too), the
            re-measurement (the suite still passes) leaves it demoted, clean calls until restored
  alone     1 client failing every call beside 3 healthy ones: demoted for itself, never for them

    python scripts/drift_live.py                   # about a minute
    python scripts/drift_live.py --healthy 1000    # shorter healthy phase
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import answers  # noqa: E402
import openai  # noqa: E402
from scripted import ScriptedServer, SuiteScript, ThreadedServer  # noqa: E402

from gatekeeper.config import Settings  # noqa: E402
from gatekeeper.core.gatekeeper import Gatekeeper  # noqa: E402
from gatekeeper.observe import logs  # noqa: E402
from gatekeeper.rules.tiers import Tier  # noqa: E402
from gatekeeper.server.app import create_app  # noqa: E402
from gatekeeper.store.file import JsonFileStore  # noqa: E402
from gatekeeper.store.profile import Profile  # noqa: E402
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite  # noqa: E402

MODEL, PAIR = "agent-model", "agent-model@default"
CEILING = {"notOffered": 0.02, "invalidJson": 0.01, "invalidArgs": 0.02}  # the `large` defaults
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "execute_command",
            "description": "run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
]
FAULTY = {
    "notOffered": {"name": "format_disk", "arguments": "{}"},
    "invalidJson": {"name": "read_file", "arguments": '{"path": NaN}'},
    "invalidArgs": {"name": "read_file", "arguments": '{"path": 5}'},
}
SOUND = {"name": "read_file", "arguments": '{"path": "/etc/hosts"}'}


def at(factor: float, **override: float) -> dict[str, float]:
    """Fault rates: every kind at `factor` x its ceiling, some kinds at other multiples."""
    return {kind: override.get(kind, factor) * ceiling for kind, ceiling in CEILING.items()}


@dataclass
class Plan:
    """The upstream's fault rates now: for everyone, and per API key."""

    rates: dict[str, float] = field(default_factory=lambda: at(0.9))
    by_key: dict[str, dict[str, float]] = field(default_factory=dict)
    rng: random.Random = field(default_factory=lambda: random.Random(21))
    made: Counter[str] = field(default_factory=Counter)  # calls drawn, by kind ("sound" too)

    def call(self, key: str) -> dict[str, str]:
        draw, total = self.rng.random(), 0.0
        for kind, rate in self.by_key.get(key, self.rates).items():
            total += rate
            if draw < total:
                self.made[kind] += 1
                return FAULTY[kind]
        self.made["sound"] += 1
        return SOUND


class Upstream(ScriptedServer):
    """Suite prompts answered perfectly (a re-measurement certifies `large`); agent requests get
    one call drawn from the plan for the requesting key."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        script = SuiteScript(DEFAULT_SUITE_DIR)

        def respond(body: dict[str, Any]) -> dict[str, Any]:
            try:
                test, step = script.locate(body)
            except (KeyError, StopIteration):
                key = self.headers[-1].get("authorization", "").removeprefix("Bearer ")
                return {"content": None, "tool_calls": [plan.call(key)]}
            return answers.perfect(test, step)

        super().__init__(respond)


@dataclass
class Live:
    gk: Gatekeeper
    url: str
    plan: Plan
    upstream: Upstream
    clients: dict[str, openai.OpenAI] = field(default_factory=dict)

    def ask(self, key: str) -> tuple[str, str]:
        """One agent request from the client with API key `key`: (profile source, tier) served."""
        client = self.clients.get(key)
        if client is None:
            client = self.clients[key] = openai.OpenAI(
                base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=60
            )
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=[{"role": "user", "content": "show me /etc/hosts"}], tools=TOOLS
        )
        self.gk.drift.drain()  # judge it now rather than in the worker's next batch
        return raw.headers["x-gatekeeper-profile"], raw.headers["x-gatekeeper-tier"]

    def demoted(self, key: str) -> bool:
        return self.gk.lookup(MODEL, None, self._identity(key)).source == "demoted"  # type: ignore[union-attr]

    def _identity(self, key: str) -> str:
        from gatekeeper.drift.identity import client_identity

        return client_identity({"authorization": f"Bearer {key}"}, self.gk.settings)

    def suite_runs(self) -> int:
        first = next(iter(SuiteScript(DEFAULT_SUITE_DIR).tests))
        return sum(
            1
            for body in self.upstream.requests
            if next((m["content"] for m in body["messages"] if m["role"] == "user"), None) == first
            and not any(m["role"] == "assistant" for m in body["messages"])
        )


@contextmanager
def live(drift: dict[str, Any] | None = None) -> Iterator[Live]:
    suite = load_suite(DEFAULT_SUITE_DIR)
    plan = Plan()
    with tempfile.TemporaryDirectory() as tmp, Upstream(plan) as upstream:
        store = Path(tmp) / "models_profile.json"
        JsonFileStore(store).save(
            [
                Profile(
                    model=MODEL,
                    provider="openai-compatible",
                    tier=Tier.LARGE,
                    scores={"instruction": 1.0, "json": 1.0, "toolCalling": 1.0},
                    tokens_per_second=42.0,
                    tested_at=datetime.now(UTC).isoformat(),
                    benchmark_version=suite.version,
                    tests_hash=suite.hash,
                    reasoning_effort="default",
                )
            ]
        )
        settings = Settings.model_validate(
            {
                "upstream": {"base_url": upstream.base_url},
                "store": str(store),
                "tools": {"default_tier": "small", "required_tier": {"execute_command": "large"}},
                "bench": {"retry_after_s": 0.2, "max_retries": 0, "timeout_s": 10},
                "drift": drift or {},
            }
        )
        gk = Gatekeeper(settings)
        try:
            with ThreadedServer(create_app(gk)) as server:
                yield Live(gk, f"http://127.0.0.1:{server.port}", plan, upstream)
        finally:
            gk.close()


# -- the scenarios ------------------------------------------------------------------------


def healthy(calls: int, clients: int = 4) -> dict[str, Any]:
    with live() as run:
        run.plan.rates = at(0.9)
        seen = [run.ask(f"healthy-{i % clients}") for i in range(calls)]
    return {
        "calls": calls,
        "clients": clients,
        "faults": {k: run.plan.made[k] for k in CEILING},
        "served_demoted": sum(source == "demoted" for source, _ in seen),
    }


def fault(before: int = 500, during: int = 1000, clean_max: int = 5000) -> dict[str, Any]:
    with live() as run:
        run.plan.rates = at(0.9)
        early = sum(run.ask("agent")[0] == "demoted" for _ in range(before))
        run.plan.rates = at(0.9, invalidArgs=5)
        first = None
        after = []
        for i in range(during):
            served = run.ask("agent")
            if first is None and served[0] == "demoted":
                first = i + 1
            elif first is not None:
                after.append(served)
        run.plan.rates = at(0.0)  # the provider fixed the model
        restored = None
        for i in range(clean_max):
            if run.ask("agent") == ("measured", "large"):
                restored = i + 1
                break
    return {
        "demoted_before_fault": early,
        "calls_to_demotion": first,
        "large_after_demotion_while_faulty": sum(tier == "large" for _, tier in after),
        "faulty_answers_after_demotion": len(after),
        "clean_calls_to_large": restored,
    }


def spread(clients: int = 3, during_max: int = 3000, clean_max: int = 6000) -> dict[str, Any]:
    keys = [f"team-{i}" for i in range(clients)]
    with live() as run:
        run.plan.rates = at(0.9)
        for i in range(300):
            run.ask(keys[i % clients])
        measured = run.suite_runs()
        run.plan.rates = at(0.9, invalidArgs=5)
        everyone = first_client = None
        for i in range(during_max):
            if run.ask(keys[i % clients])[0] == "demoted" and first_client is None:
                first_client = i + 1
            if run.gk.drift.demotion(PAIR, None) is not None:
                everyone = i + 1
                break
        newcomer = run.ask("newcomer")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            e["event"] == "remeasured" for e in run.gk.drift.report()[PAIR]["history"]
        ):
            time.sleep(0.2)  # the re-measurement of everyone's demotion lands
        remeasured = run.suite_runs() > measured
        after_remeasure = run.ask("newcomer")
        run.plan.rates = at(0.0)
        restored = None
        for i in range(clean_max):
            run.ask(keys[i % clients])
            if run.gk.drift.demotion(PAIR, None) is None:
                restored = i + 1
                break
        last = run.ask("newcomer")
    return {
        "clients": clients,
        "calls_to_first_clients_demotion": first_client,
        "calls_to_everyones_demotion": everyone,
        "newcomer_served": newcomer,
        "remeasured": remeasured,
        "newcomer_after_remeasurement": after_remeasure,
        "clean_calls_to_restore": restored,
        "newcomer_at_the_end": last,
    }


def alone(calls: int = 3000) -> dict[str, Any]:
    with live() as run:
        run.plan.rates = at(0.9)
        run.plan.by_key["attacker"] = {"notOffered": 1.0}  # it asks for a tool it never offers
        attacker, others = [], []
        for i in range(calls):
            if i % 4 == 0:
                attacker.append(run.ask("attacker"))
            else:
                others.append(run.ask(f"honest-{i % 3}"))
        report = run.gk.drift.report()[PAIR]
    return {
        "calls": calls,
        "attacker_served_demoted": sum(s == "demoted" for s, _ in attacker),
        "attacker_answers": len(attacker),
        "others_served_demoted": sum(s == "demoted" for s, _ in others),
        "others_answers": len(others),
        "demoted_for_everyone": report["demoted"] is not None,
        "clients_demoted": len(report["clientsDemoted"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--healthy", type=int, default=5000, help="calls of the healthy scenario (default 5000)")
    parser.add_argument("--only", choices=("healthy", "fault", "spread", "alone"), action="append")
    args = parser.parse_args()
    logs.configure("error")  # the figures, not a log line per request
    chosen = args.only or ["healthy", "fault", "spread", "alone"]
    started = time.perf_counter()
    for name in chosen:
        t0 = time.perf_counter()
        figures = {
            "healthy": lambda: healthy(args.healthy),
            "fault": fault,
            "spread": spread,
            "alone": alone,
        }[name]()
        print(f"{name:8} {json.dumps(figures)}  ({time.perf_counter() - t0:.0f} s)", flush=True)
    print(f"({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
