"""Shared fixtures: scripted upstreams and a real proxy on a real port."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import openai
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from scripted import ScriptedServer, SuiteScript, ThreadedServer  # noqa: E402

from gatekeeper.config import Settings  # noqa: E402
from gatekeeper.core import Gatekeeper  # noqa: E402
from gatekeeper.profiles import JsonFileStore, Profile  # noqa: E402
from gatekeeper.proxy import create_app  # noqa: E402
from gatekeeper.suite import DEFAULT_SUITE_DIR, Suite, load_suite  # noqa: E402
from gatekeeper.tiers import Tier  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEED_SUITE = Path("/work/shared/seed-suite")


@pytest.fixture(scope="session")
def default_suite() -> Suite:
    return load_suite(DEFAULT_SUITE_DIR)


def make_profile(model: str, tier: Tier, suite: Suite, effort: str = "default", **changes) -> Profile:
    scores = {Tier.SMALL: 0.2, Tier.MEDIUM: 0.7, Tier.LARGE: 1.0}[tier]
    fields = dict(model=model, provider="openai-compatible", tier=tier,
                  scores={"instruction": scores, "json": scores, "toolCalling": scores}, tokens_per_second=42.0,
                  tested_at=datetime.now(timezone.utc).isoformat(), benchmark_version=suite.version,
                  tests_hash=suite.hash, reasoning_effort=effort)
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
        "bench": {"retry_after_s": 0.2, "max_retries": 0, "timeout_s": 10},
    }
    return Settings.model_validate(base | changes)


def seed_store(store: Path, *profiles: Profile) -> None:
    JsonFileStore(store).save(list(profiles))


@pytest.fixture
def gk(upstream: ScriptedServer, store_path: Path, default_suite: Suite) -> Iterator[Gatekeeper]:
    """A Gatekeeper with measured small-, medium- and large-model, effortful@low/high/xhigh at
    small/medium/large (effortful@default unmeasured) and pinned-model pinned to medium."""
    seed_store(store_path,
               make_profile("small-model", Tier.SMALL, default_suite),
               make_profile("medium-model", Tier.MEDIUM, default_suite),
               make_profile("large-model", Tier.LARGE, default_suite),
               make_profile("effortful", Tier.SMALL, default_suite, effort="low"),
               make_profile("effortful", Tier.MEDIUM, default_suite, effort="high"),
               make_profile("effortful", Tier.LARGE, default_suite, effort="xhigh"))
    gatekeeper = Gatekeeper(settings_for(upstream.base_url, store_path, pins={"pinned-model": "medium"}))
    yield gatekeeper
    gatekeeper.close()
