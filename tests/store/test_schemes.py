"""Store locations by URL scheme (store/schemes.py): a Redis unix socket is a Redis store, in the
config and in `open_store`; an unknown `scheme://` is an error, never a file path."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_profile
from redis_server import RedisServer, require_server

from gatekeeper.config import Settings
from gatekeeper.errors import StoreError
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore, is_shared, open_store
from gatekeeper.store.redis import RedisStore


@pytest.mark.parametrize(
    "url", ["unix:///run/redis/redis.sock", "unix:///run/redis.sock?db=3", "unix://:secret@/run/redis.sock?db=0"]
)
def test_a_socket_url_is_kept_as_a_url(url):
    settings = Settings(store=url)
    assert settings.store == url and is_shared(settings.store)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("unix://", "expected a socket path"),
        ("unix://host/run/redis.sock", "expected a socket path"),
        ("unix:///run/redis.sock?db=zero", "the database in a Redis URL is a number"),
        ("postgres://db/profiles", "no store serves 'postgres'://"),
        ("file:///tmp/models_profile.json", "no store serves 'file'://"),
    ],
)
def test_a_bad_or_unknown_store_url_is_refused_not_taken_for_a_path(url, message):
    with pytest.raises(ValueError, match=message):
        Settings(store=url)


def test_a_path_is_a_file_store(tmp_path):
    settings = Settings(store=str(tmp_path / "models_profile.json"))
    assert settings.store == tmp_path / "models_profile.json" and not is_shared(settings.store)
    assert isinstance(open_store(settings.store), JsonFileStore)


def test_open_store_refuses_an_unknown_scheme():
    with pytest.raises(StoreError, match="no store serves 'postgres'://"):
        open_store("postgres://db/profiles")


def test_open_store_reaches_redis_through_its_unix_socket(tmp_path: Path, default_suite):
    require_server()
    with RedisServer(tmp_path, socket=True) as server:
        assert server.socket_url is not None
        store = open_store(server.socket_url, listen=False)
        try:
            assert isinstance(store, RedisStore)
            store.save([make_profile("m", Tier.MEDIUM, default_suite)])
        finally:
            store.close()
        by_port = open_store(server.url, listen=False)  # the same server, reached by its port
        try:
            assert by_port.load().profiles["m@default"].tier is Tier.MEDIUM
        finally:
            by_port.close()
