"""Shared fixtures and helpers: tool schemas, scripted upstreams, a real proxy on a real port,
and one way to wait for something that happens in the background (`wait_until`).

Test modules import the helpers with `from conftest import ...` (tests/ is on sys.path).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).parent))

import answers
from scripted import ScriptedServer, SuiteScript, ThreadedServer
from upstreams import NativeServer

from gatekeeper.config import Settings
from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier
from gatekeeper.server.app import create_app
from gatekeeper.store import JsonFileStore
from gatekeeper.store.profile import Profile
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, Suite, load_suite

ROOT = Path(__file__).resolve().parent.parent
# The seed's own suite lives outside the repository: tests that read it skip where it is absent.
SEED_SUITE = Path("/work/shared/seed-suite")
needs_seed_suite = pytest.mark.skipif(not SEED_SUITE.is_dir(), reason=f"the seed suite {SEED_SUITE} is not here")

T = TypeVar("T")


# -- tools ---------------------------------------------------------------------------------


def tool(name: str, parameters: dict | None = None, **params: str) -> dict:
    """An OpenAI function tool: `parameters` as given, else built from `params` (each a required
    parameter and its JSON type)."""
    if parameters is None:
        parameters = {"type": "object", "properties": {p: {"type": t} for p, t in params.items()}}
        if params:
            parameters["required"] = list(params)
    return {"type": "function", "function": {"name": name, "description": f"the {name} tool", "parameters": parameters}}


# Under settings_for's rules: read_file is small, write_file medium, execute_command large.
TOOLS = [
    tool("read_file", path="string"),
    tool("write_file", path="string", content="string"),
    tool("execute_command", command="string"),
]


def names(tools: list[dict] | None) -> list[str] | None:
    """The function names of a list of tools (None stays None: "no tools field")."""
    return None if tools is None else [t["function"]["name"] for t in tools]


def sent_tools(upstream: ScriptedServer) -> list[str] | None:
    """The tool names of the last request `upstream` received (None: it had no `tools` field)."""
    return names(upstream.requests[-1].get("tools"))


def metric(proxy_url: str, name: str) -> float:
    """The value of an unlabelled sample on the proxy's `/metrics` (a counter's `_total`), 0 if absent."""
    text = httpx.get(proxy_url + "/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and not sample.labels
    )


# -- waiting for background work -----------------------------------------------------------


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 20.0) -> T:
    """Poll `condition` until it returns something truthy, and return that; fail naming `what`.

    The one way tests wait for background work (a measurement landing, a server starting): a
    deadline, never a fixed sleep followed by an assertion.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.02)


def wait_serving(
    url: str, process: subprocess.Popen[Any], timeout_s: float = 60.0, log: Callable[[], str] | None = None
) -> None:
    """Wait until GET `url` answers 200 from a server `process` started; fail at once, with the
    end of its log (`log()`, else its stderr), if the process exits first."""

    def up() -> bool:
        if process.poll() is not None:
            output = log() if log else (process.communicate()[1] or "")
            output = output.decode(errors="replace") if isinstance(output, bytes) else output
            pytest.fail(f"the server exited with status {process.returncode} before serving {url}:\n{output[-2000:]}")
        try:
            return httpx.get(url, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_until(up, f"{url} to answer", timeout_s)


async def await_until(condition: Callable[[], T | Awaitable[T]], what: str, timeout_s: float = 20.0) -> T:
    """`wait_until` for async tests: the event loop keeps running while it polls."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="session")
def default_suite() -> Suite:
    return load_suite(DEFAULT_SUITE_DIR)


def make_profile(model: str, tier: Tier, suite: Suite, effort: str = "default", **changes) -> Profile:
    scores = {Tier.SMALL: 0.2, Tier.MEDIUM: 0.7, Tier.LARGE: 1.0}[tier]
    fields = dict(
        model=model,
        provider="openai-compatible",
        tier=tier,
        scores={"instruction": scores, "json": scores, "toolCalling": scores},
        tokens_per_second=42.0,
        tested_at=datetime.now(UTC).isoformat(),
        benchmark_version=suite.version,
        tests_hash=suite.hash,
        reasoning_effort=effort,
    )
    return Profile(**(fields | changes))


def agent_or_suite(script: SuiteScript, behaviour: Callable, agent: Callable[[dict], dict]) -> Callable[[dict], dict]:
    """Suite prompts get `behaviour`; anything else is an agent request answered by `agent`."""

    def respond(body: dict) -> dict:
        try:
            test, step = script.locate(body)
        except (KeyError, StopIteration):
            return agent(body)
        return behaviour(test, step)

    return respond


def measuring_upstream(
    suite: Suite,
    behaviour: Callable[..., dict] = answers.perfect,
    agent: Callable[[dict], dict] | None = None,
    **server: Any,
) -> ScriptedServer:
    """A scripted upstream that answers the suite's prompts with `behaviour` (perfect: a large
    model) and any other request with `agent` (default: a plain "agent answer")."""
    agent = agent or (lambda body: {"content": "agent answer", "tool_calls": []})
    return ScriptedServer(agent_or_suite(SuiteScript(suite), behaviour, agent), **server)


def suite_requests(upstream: ScriptedServer, suite: Suite) -> list[dict]:
    """The requests `upstream` received that belong to a measurement with `suite`."""
    script = SuiteScript(suite)
    found = []
    for body in upstream.requests:
        try:
            script.locate(body)
        except (KeyError, StopIteration):
            continue
        found.append(body)
    return found


class Proxy:
    def __init__(self, gk: Gatekeeper, server: ThreadedServer) -> None:
        self.gk = gk
        self.url = f"http://127.0.0.1:{server.port}"
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key="client-key", max_retries=0, timeout=30)


@contextmanager
def running_proxy(settings: Settings, **kwargs) -> Iterator[Proxy]:
    gk = Gatekeeper(settings, **kwargs)
    try:
        with ThreadedServer(create_app(gk)) as server:
            yield Proxy(gk, server)
    finally:
        gk.close()  # the app never closes a Gatekeeper it did not create


@contextmanager
def small_model_proxy(upstream_url: str, store: Path, suite: Suite, **changes) -> Iterator[Proxy]:
    """The protocol tests' proxy: `small-model` measured small, an upstream speaking all three
    protocols natively (so nothing is translated unless `changes` says otherwise)."""
    seed_store(store, make_profile("small-model", Tier.SMALL, suite))
    changes.setdefault("upstream", {"base_url": upstream_url, "protocols": ["chat", "responses", "messages"]})
    with running_proxy(settings_for(upstream_url, store, **changes)) as running:
        yield running


def claude(proxy: Proxy) -> anthropic.Anthropic:
    """The official Anthropic client, pointed at the proxy (no retries: a 400 is the answer)."""
    return anthropic.Anthropic(base_url=proxy.url, api_key="k", max_retries=0)


@contextmanager
def native_gate(
    protocols: list[str], store: Path, suite: Suite, rules: dict[str, Any], unknown_fields: str = "refuse"
) -> Iterator[tuple[Proxy, NativeServer]]:
    """A proxy (the `small-model` measured small, tool `rules`) in front of a native upstream
    speaking `protocols` (a client's protocol not among them is translated to chat)."""
    with NativeServer(lambda body: {"content": "ok"}) as upstream:
        settings = {"base_url": upstream.base_url, "protocols": protocols, "unknown_fields": unknown_fields}
        with small_model_proxy(upstream.base_url, store, suite, upstream=settings, tools=rules) as proxy:
            yield proxy, upstream


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "models_profile.json"


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with ScriptedServer() as server:
        yield server


def settings_for(upstream_url: str, store: Path, **changes) -> Settings:
    base = {
        "upstream": {"base_url": upstream_url, "api_key": "upstream-key"},
        "store": str(store),
        "tools": {"default_tier": "small", "required_tier": {"execute_command": "large", "write_*": "medium"}},
        # risk 1: the tier on one sample's point estimate, as these tests were written; the bounds
        # and their guarantee are tested in tests/measuring/ at the default risk.
        # tool_budget off: these tests count the suite's calls; the budget's measurement is tested
        # on its own (tests/measuring/test_budget.py).
        "bench": {"retry_after_s": 0.2, "max_retries": 0, "timeout_s": 10, "risk": 1, "tool_budget": False},
        # Tests written before `blocked_calls: explain` (the default) assert stripped answers;
        # explain is tested on its own (tests/protocols/test_answer_proxy.py).
        "blocked_calls": "strip",
    }
    return Settings.model_validate(base | changes)


def seed_store(store: Path, *profiles: Profile) -> None:
    JsonFileStore(store).save(list(profiles))


@pytest.fixture
def gk(upstream: ScriptedServer, store_path: Path, default_suite: Suite) -> Iterator[Gatekeeper]:
    """A Gatekeeper with measured small-, medium- and large-model, effortful@low/high/xhigh at
    small/medium/large (effortful@default unmeasured) and pinned-model pinned to medium."""
    seed_store(
        store_path,
        make_profile("small-model", Tier.SMALL, default_suite),
        make_profile("medium-model", Tier.MEDIUM, default_suite),
        make_profile("large-model", Tier.LARGE, default_suite),
        make_profile("effortful", Tier.SMALL, default_suite, effort="low"),
        make_profile("effortful", Tier.MEDIUM, default_suite, effort="high"),
        make_profile("effortful", Tier.LARGE, default_suite, effort="xhigh"),
    )
    gatekeeper = Gatekeeper(settings_for(upstream.base_url, store_path, pins={"pinned-model": "medium"}))
    yield gatekeeper
    gatekeeper.close()
