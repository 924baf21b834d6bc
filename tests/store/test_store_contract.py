"""What every profile store promises (store/base.py `ProfileStore`), run on each kind: the JSON
file, Redis (when a redis-server is installed) and a toy store added the way a new one is, one
module (tests/fixtures/toy_store/) and one line, `register_store("toy", TOY_STORE)`; then a proxy
served from the toy store."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from conftest import make_profile, running_proxy, settings_for, tool, wait_until
from fixtures.toy_store import PLACES, TOY_STORE
from redis_server import RedisServer, require_server
from scripted import ScriptedServer

from gatekeeper.config import Settings
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import SCHEMES, ProfileStore, demotion_board, is_shared, open_store, register_store

Opener = Callable[[], ProfileStore]  # a store on one location, opened once per call


@pytest.fixture
def toy_store() -> Iterator[None]:
    register_store("toy", TOY_STORE)  # the one line
    try:
        yield
    finally:
        SCHEMES.pop("toy")
        PLACES.clear()


@pytest.fixture(params=["file", "redis", "toy"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    if request.param == "toy":
        request.getfixturevalue("toy_store")
        location = "toy://contract"
    elif request.param == "redis":
        require_server()
        server = RedisServer(tmp_path)
        server.__enter__()
        request.addfinalizer(lambda: server.__exit__(None, None, None))
        location = server.url
    else:
        location = str(tmp_path / "models_profile.json")
    opened: list[ProfileStore] = []

    def open_one() -> ProfileStore:
        opened.append(open_store(location))
        return opened[-1]

    yield open_one
    for store in opened:
        store.close()


def test_profiles_and_recommendations_round_trip(stores, default_suite):
    store = stores()
    profile = make_profile("m", Tier.MEDIUM, default_suite, effort="low")
    assert store.save([profile], {"m": "low"}) is True
    assert store.get("m@low") == profile and store.fetch("m@low") == profile
    data = store.load()
    assert data.profiles == {"m@low": profile} and data.recommendations == {"m": "low"}
    assert store.problem is None


def test_a_save_is_seen_by_another_store_on_the_same_location(stores, default_suite):
    writer, reader = stores(), stores()
    writer.save([make_profile("m", Tier.LARGE, default_suite)])
    assert wait_until(lambda: reader.fetch("m@default"), "the profile to reach the other store").tier is Tier.LARGE


def test_delete_removes_one_pair(stores, default_suite):
    store = stores()
    store.save([make_profile("a", Tier.SMALL, default_suite), make_profile("b", Tier.SMALL, default_suite)])
    assert store.delete("a@default") is True and store.delete("a@default") is False
    assert set(store.load().profiles) == {"b@default"}


def test_a_change_listener_hears_a_save(stores, default_suite):
    store = stores()
    heard: list[str] = []
    store.on_change(heard.append)
    store.save([make_profile("m", Tier.SMALL, default_suite)])
    assert wait_until(lambda: "m@default" in heard, "the listener to hear the save")


def test_a_lease_is_exclusive_and_a_superseded_one_cannot_write(stores, default_suite):
    store = stores()
    coordinator = store.coordinator()
    stale = coordinator.acquire("m@default", 30)
    assert stale is not None and coordinator.acquire("m@default", 30) is None
    coordinator.release(stale)
    newer = coordinator.acquire("m@default", 30)
    assert newer is not None and newer.token > stale.token
    assert store.save([make_profile("m", Tier.SMALL, default_suite)], lease=newer) is True
    assert store.save([make_profile("m", Tier.LARGE, default_suite)], lease=stale) is False
    assert store.fetch("m@default").tier is Tier.SMALL


def test_backoff_is_counted_and_cleared(stores):
    coordinator = stores().coordinator()
    assert coordinator.record_failure("m@default", 30, 60) == (1, 30)
    assert coordinator.backoff_s("m@default") > 0
    coordinator.clear_failures("m@default")
    assert coordinator.backoff_s("m@default") == 0


def test_a_signed_out_session_stays_out(stores):
    sessions = stores().sessions()
    assert sessions.revoked("s1") is False
    sessions.revoke("s1", 4_000_000_000.0)
    assert sessions.revoked("s1") is True


def test_a_store_declares_what_it_brings_on_its_scheme(toy_store, tmp_path):
    # Shared by replicas, but no board for their demotions: each process keeps its own (no Redis
    # client is built for a store that is not Redis).
    assert is_shared("toy://x") and demotion_board("toy://x") is None
    assert not is_shared(tmp_path / "p.json") and demotion_board(tmp_path / "p.json") is None
    assert open_store("toy://x").wrong_keys() is None
    with pytest.raises(ValueError, match="expected a name"):
        Settings(store="toy://")


def test_a_proxy_serves_from_the_toy_store(toy_store, default_suite):
    open_store("toy://proxy").save([make_profile("small-model", Tier.SMALL, default_suite)])
    with ScriptedServer() as upstream:
        settings = settings_for(upstream.base_url, Path("unused")).model_copy(update={"store": "toy://proxy"})
        with running_proxy(settings) as proxy:
            answer = httpx.post(
                f"{proxy.url}/v1/chat/completions",
                json={
                    "model": "small-model",
                    "messages": [{"role": "user", "content": "hi"}],
                    "tools": [tool("read_file"), tool("execute_command")],
                },
                timeout=30,
            )
    assert answer.status_code == 200
    assert answer.headers["x-gatekeeper-tier"] == "small" and answer.headers["x-gatekeeper-profile"] == "measured"
    assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]
