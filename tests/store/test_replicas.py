"""Three `gatekeeper serve` processes sharing one store (Redis, or one JSON file on one host).

The upstream is a scripted OpenAI-compatible server in this process that records every call,
so "one suite run" is counted, not inferred. Leases are short here (`lease_ttl_s: 2`) so the
take-over after a kill -9 is quick.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import answers
import httpx
import openai
import pytest
from conftest import ROOT, agent_or_suite
from redis_server import RedisServer, require_server
from scripted import ScriptedServer, SuiteScript, free_port

from gatekeeper.store.redis import _lease_key

ADMIN = {"authorization": "Bearer admin-secret"}
LEASE_TTL_S = 2.0


class Replica:
    def __init__(self, config: Path, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        self.log = (workdir / f"replica-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--port", str(self.port)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="k", max_retries=0, timeout=60)

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, f"replica on {self.port} exited; see {self.log.name}"
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"replica on {self.port} did not start"
            time.sleep(0.05)

    def ask(self, model: str = "m"):
        return self.client.chat.completions.with_raw_response.create(
            model=model,
            messages=[{"role": "user", "content": "hi"}],
            tools=[{"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}],
        )

    def profiles(self) -> dict:
        return httpx.get(self.url + "/admin/profiles", headers=ADMIN, timeout=10).json()["profiles"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@contextmanager
def replicas(store: str, upstream: ScriptedServer, workdir: Path, n: int = 3) -> Iterator[list[Replica]]:
    config = workdir / "gatekeeper.yaml"
    config.write_text(f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "{store}"
unknown_models: wait
wait_timeout_s: 60
admin_key: admin-secret
log_level: info
tools: {{required_tier: {{execute_command: large}}}}
bench: {{retry_after_s: 0.5, max_retries: 0, timeout_s: 20, risk: 1, tool_budget: false}}  # one sample, as written (see conftest)
lazy: {{lease_ttl_s: {LEASE_TTL_S}}}
""")
    with ExitStack() as stack:
        started = [Replica(config, workdir) for _ in range(n)]
        for replica in started:
            stack.callback(replica.stop)
        for replica in started:
            replica.wait_ready()
        yield started


def suite_runs(upstream: ScriptedServer, suite, model: str) -> float:
    """Complete-or-partial suite runs upstream for `model`: first-step calls / tests in the suite."""
    script = SuiteScript(suite)  # recognises randomised tests' instances too

    def first_step(body: dict) -> bool:
        try:
            return body.get("model") == model and script.locate(body)[1] == 0
        except (KeyError, StopIteration):
            return False

    return sum(1 for body in list(upstream.requests) if first_step(body)) / len(suite.tests)


def measuring_upstream(suite, delay_s: float = 0.02) -> ScriptedServer:
    agent = lambda body: {"content": "agent answer", "tool_calls": []}  # noqa: E731
    return ScriptedServer(agent_or_suite(SuiteScript(suite), answers.perfect, agent), delay_s=delay_s)


def burst(fleet: list[Replica], model: str, count: int) -> list:
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda i: fleet[i % len(fleet)].ask(model), range(count)))


def eventually(condition, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s, what
        time.sleep(0.01)
    return time.monotonic() - started


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    require_server()
    with RedisServer(tmp_path) as server:
        yield server


@pytest.mark.parametrize("kind", ["redis", "file"])
def test_a_burst_for_an_unknown_model_costs_one_suite_run(kind, tmp_path, default_suite, request):
    store = request.getfixturevalue("redis_server").url if kind == "redis" else str(tmp_path / "profiles.json")
    with measuring_upstream(default_suite) as upstream, replicas(store, upstream, tmp_path) as fleet:
        answers_ = burst(fleet, "m", 30)
        assert {r.headers["x-gatekeeper-profile"] for r in answers_} == {"measured"}
        assert {r.headers["x-gatekeeper-tier"] for r in answers_} == {"large"}
        # Every replica now serves the pair without measuring it again.
        assert {fleet[i].ask("m").headers["x-gatekeeper-profile"] for i in range(3)} == {"measured"}
    assert suite_runs(upstream, default_suite, "m") == 1


def test_an_invalidation_reaches_every_replica_within_a_second_and_is_remeasured_once(
    redis_server, tmp_path, default_suite
):
    with measuring_upstream(default_suite) as upstream, replicas(redis_server.url, upstream, tmp_path) as fleet:
        burst(fleet, "m", 6)
        assert all("m@default" in r.profiles() for r in fleet)
        deleted = httpx.delete(fleet[0].url + "/admin/profiles/m@default", headers=ADMIN, timeout=10)
        assert deleted.status_code == 200
        seen_after = eventually(
            lambda: all("m@default" not in r.profiles() for r in fleet[1:]),
            1.0,
            "the invalidation did not reach the other replicas within 1 s",
        )
        print(f"invalidation seen by the other replicas after {seen_after * 1000:.0f} ms")
        assert {r.headers["x-gatekeeper-profile"] for r in burst(fleet, "m", 12)} == {"measured"}
    assert suite_runs(upstream, default_suite, "m") == 2


def test_a_replica_killed_while_measuring_is_taken_over(redis_server, tmp_path, default_suite):
    with (
        measuring_upstream(default_suite, delay_s=0.3) as upstream,
        replicas(redis_server.url, upstream, tmp_path) as fleet,
    ):
        holder_index = 0
        pool = ThreadPoolExecutor(4)
        pool.submit(fleet[holder_index].ask, "k")  # its answer dies with it
        client = redis_server.client()
        eventually(lambda: client.get(_lease_key("k@default")) is not None, 30, "nobody took the lease")
        eventually(lambda: suite_runs(upstream, default_suite, "k") > 0, 30, "the holder did not start measuring")
        owner = client.get(_lease_key("k@default")).decode().split("|", 1)[1]
        assert int(owner.split(":")[1]) == fleet[holder_index].proc.pid
        fleet[holder_index].proc.kill()  # kill -9, mid-measurement
        survivors = [pool.submit(fleet[i].ask, "k") for i in (1, 2)]
        headers = [f.result(timeout=90).headers for f in survivors]
        pool.shutdown(wait=False)
        assert {h["x-gatekeeper-profile"] for h in headers} == {"measured"}
        assert client.hget("{gatekeeper}:profiles", "k@default") is not None
    assert 1 < suite_runs(upstream, default_suite, "k") <= 2  # the killed run's part plus one whole run


def test_redis_restarted_mid_traffic_causes_no_5xx(redis_server, tmp_path, default_suite):
    with measuring_upstream(default_suite) as upstream, replicas(redis_server.url, upstream, tmp_path) as fleet:
        burst(fleet, "m", 3)
        statuses: list[int] = []

        def traffic(i: int) -> None:
            for j in range(40):
                model = "m" if j % 4 else f"unknown-{i}-{j}"
                try:
                    raw = fleet[(i + j) % 3].ask(model)
                    statuses.append(raw.status_code)
                    if model == "m":
                        assert raw.headers["x-gatekeeper-tier"] == "large"
                except openai.APIStatusError as exc:
                    statuses.append(exc.status_code)

        with ThreadPoolExecutor(4) as pool:
            running = [pool.submit(traffic, i) for i in range(4)]
            eventually(lambda: len(statuses) > 10, 30, "no traffic")
            redis_server.stop()
            eventually(lambda: len(statuses) > 60, 60, "traffic stalled while Redis was down")
            redis_server.start()
            for future in running:
                future.result(timeout=120)
        assert statuses and all(status < 500 for status in statuses), sorted(set(statuses))
