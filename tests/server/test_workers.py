"""`gatekeeper serve --workers N` as a real command: N processes on one port, one real
redis-server, a scripted upstream counting calls. They behave as one gateway: one measurement per
pair, metrics summed, a reload reaching every worker; a store that cannot share is refused."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import answers
import httpx
import pytest
from conftest import ROOT, agent_or_suite
from redis_server import RedisServer, require_server
from scripted import ScriptedServer, SuiteScript, free_port

ADMIN = {"authorization": "Bearer admin-secret"}
TOOLS = [{"type": "function", "function": {"name": "execute_command", "parameters": {"type": "object"}}}]


def config_text(store: str, upstream: ScriptedServer, pins: str = "{}") -> str:
    return f"""
upstream: {{base_url: "{upstream.base_url}", api_key: upstream-key}}
store: "{store}"
unknown_models: wait
wait_timeout_s: 60
admin_key: admin-secret
log_level: info
pins: {pins}
tools: {{required_tier: {{execute_command: large}}}}
bench: {{max_retries: 0, timeout_s: 20, risk: 1, tool_budget: false}}
"""


@contextmanager
def fleet(config: Path, workers: int, workdir: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    log = workdir / f"fleet-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--port", str(port)]
            + ["--workers", str(workers)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"PYTHONPATH": str(ROOT)},
        )
        url = f"http://127.0.0.1:{port}"
        try:
            eventually(lambda: started(log) >= workers, 90, f"{workers} workers did not start; see {log}", process)
            yield url, log
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def started(log: Path) -> int:
    """Workers that started serving (distinct pids)."""
    lines = [line for line in log.read_text(errors="replace").splitlines() if '"worker_started"' in line]
    return len({re.search(r'"pid": ?(\d+)', line).group(1) for line in lines})


def eventually(condition, timeout_s: float, what: str, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process is None or process.poll() is None, what
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def ask(url: str, model: str = "m") -> httpx.Response:
    """One request on a connection of its own (so the kernel may hand it to any worker)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60, headers={"connection": "close"})


def requests_counted(url: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=10, headers={"connection": "close"}).text
    return sum(float(v) for v in re.findall(r"^gatekeeper_requests_total\{[^}]*\} (\S+)$", text, re.MULTILINE))


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    require_server()
    with RedisServer(tmp_path) as server:
        yield server


@pytest.fixture
def upstream(default_suite) -> Iterator[ScriptedServer]:
    agent = lambda body: {"content": "agent answer", "tool_calls": []}  # noqa: E731
    with ScriptedServer(agent_or_suite(SuiteScript(default_suite), answers.perfect, agent), delay_s=0.02) as server:
        yield server


def suite_runs(upstream: ScriptedServer, suite, model: str) -> float:
    script = SuiteScript(suite)

    def first_step(body: dict) -> bool:
        try:
            return body.get("model") == model and script.locate(body)[1] == 0
        except (KeyError, StopIteration):
            return False

    return sum(1 for body in list(upstream.requests) if first_step(body)) / len(suite.tests)


def test_two_workers_measure_a_pair_once_and_sum_their_metrics(redis_server, upstream, tmp_path, default_suite):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(config_text(redis_server.url, upstream))
    with fleet(config, 2, tmp_path) as (url, log):
        assert started(log) == 2
        with ThreadPoolExecutor(20) as pool:
            answered = list(pool.map(lambda _: ask(url), range(20)))
        assert {(r.status_code, r.headers["x-gatekeeper-tier"]) for r in answered} == {(200, "large")}
        assert suite_runs(upstream, default_suite, "m") == 1
        # Whichever worker answers the scrape, it counts every worker's requests.
        assert {requests_counted(url) for _ in range(8)} == {20}


def test_a_reload_on_one_worker_reaches_every_worker(redis_server, upstream, tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(config_text(redis_server.url, upstream, pins="{m: medium}"))
    with fleet(config, 2, tmp_path) as (url, log):
        assert {ask(url).headers["x-gatekeeper-tier"] for _ in range(6)} == {"medium"}
        config.write_text(config_text(redis_server.url, upstream, pins="{m: small}"))
        reply = httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=10)
        assert reply.status_code == 200, reply.text
        eventually(lambda: started(log) >= 4, 120, f"the workers were not replaced; see {log}")
        # A replaced worker finishes the connections it holds before it exits: once it has, every
        # answer is the new config's.
        eventually(
            lambda: {ask(url).headers["x-gatekeeper-tier"] for _ in range(8)} == {"small"},
            60,
            f"a worker still serves the old config; see {log}",
        )


def test_a_bad_config_reloads_no_worker(redis_server, upstream, tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(config_text(redis_server.url, upstream, pins="{m: medium}"))
    with fleet(config, 2, tmp_path) as (url, log):
        config.write_text(config_text(redis_server.url, upstream, pins="{m: huge}"))
        reply = httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=10)
        assert reply.status_code == 400 and "pins" in reply.json()["error"]["message"]
        assert started(log) == 2 and ask(url).headers["x-gatekeeper-tier"] == "medium"


def test_several_workers_on_a_file_store_are_refused(upstream, tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(config_text(str(tmp_path / "profiles.json"), upstream))
    done = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--workers", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    assert done.returncode != 0
    assert "not shared by processes" in done.stderr and "redis://" in done.stderr


def test_a_config_whose_suite_cannot_load_reloads_no_worker(redis_server, upstream, tmp_path):
    """Each new worker loads the suite: a reload that one could not start with is a 400, and the
    fleet keeps serving the config it has."""
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(config_text(redis_server.url, upstream, pins="{m: medium}"))
    broken = tmp_path / "suite"
    broken.mkdir()
    (broken / "01_bogus.json").write_text('{"id": "x", "category": "bogus"}')
    with fleet(config, 2, tmp_path) as (url, log):
        config.write_text(config_text(redis_server.url, upstream, pins="{m: small}") + f'suite: "{broken}"\n')
        reply = httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=10)
        assert reply.status_code == 400, reply.text
        assert "suite: cannot be loaded" in reply.json()["error"]["message"] and str(broken) not in reply.text
        assert started(log) == 2 and {ask(url).headers["x-gatekeeper-tier"] for _ in range(6)} == {"medium"}


def test_more_workers_than_the_machine_can_run_are_refused(redis_server, upstream, tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(config_text(redis_server.url, upstream))
    too_many = 4 * (os.cpu_count() or 1) + 1
    done = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--workers", str(too_many)],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"PYTHONPATH": str(ROOT), "COLUMNS": "200"},
    )
    assert done.returncode == 2 and f"--workers {too_many}: at most {too_many - 1}" in done.stderr


def test_a_reload_lets_the_requests_in_flight_finish(redis_server, tmp_path):
    """The replaced workers finish what they serve, however long the upstream takes (up to
    wait_timeout_s + upstream.timeout_s): a reload never cuts an answer."""
    with ScriptedServer(lambda body: {"content": "slow answer"}, delay_s=12) as slow:
        config = tmp_path / "gatekeeper.yaml"
        config.write_text(config_text(redis_server.url, slow, pins="{m: medium}"))
        with fleet(config, 2, tmp_path) as (url, _), ThreadPoolExecutor(4) as pool:
            answers_ = [pool.submit(ask, url) for _ in range(4)]
            eventually(lambda: len(slow.requests) == 4, 10, "the requests did not reach the upstream")
            assert httpx.post(f"{url}/admin/reload", headers=ADMIN, timeout=10).status_code == 200
            assert [a.result().status_code for a in answers_] == [200] * 4
            assert [a.result().json()["choices"][0]["message"]["content"] for a in answers_] == ["slow answer"] * 4
