"""The YAML config: the contract's example loads; bad keys and values are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gatekeeper.config import load_settings
from gatekeeper.errors import ConfigError
from gatekeeper.rules.tiers import Tier

CONTRACT_EXAMPLE = """
upstream:
  base_url: http://127.0.0.1:8080/v1
  api_key: ${OPENAI_API_KEY}
models:
  - name: claude
    litellm_model: anthropic/claude-sonnet-4-5
    api_key: ${ANTHROPIC_API_KEY}
suite: ./benchmarks
store: ./models_profile.json
unknown_models: fail_closed
unknown_tier: small
wait_timeout_s: 120
tools:
  default_tier: small
  required_tier:
    execute_command: large
    "write_*": medium
pins:
  "gpt-4o": large
  "my-model@low": small
admin_key: ${GATEKEEPER_ADMIN_KEY}
"""


def write(tmp_path, text: str):
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(text)
    return path


def test_contract_example_loads(tmp_path, monkeypatch):
    for var, value in (("OPENAI_API_KEY", "sk-1"), ("ANTHROPIC_API_KEY", "sk-2"), ("GATEKEEPER_ADMIN_KEY", "adm")):
        monkeypatch.setenv(var, value)
    settings = load_settings(write(tmp_path, CONTRACT_EXAMPLE))
    assert settings.upstream.api_key == "sk-1" and settings.admin_key == "adm"
    assert settings.model_route("claude").litellm_model == "anthropic/claude-sonnet-4-5"
    assert settings.pins == {"gpt-4o": Tier.LARGE, "my-model@low": Tier.SMALL}
    assert settings.suite == tmp_path / "benchmarks" and settings.store == tmp_path / "models_profile.json"


def test_unset_environment_variable_is_an_error_naming_key_and_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with pytest.raises(ConfigError, match=r"upstream\.api_key: environment variable NOPE_KEY is not set"):
        load_settings(write(tmp_path, "upstream:\n  api_key: ${NOPE_KEY}\n"))


def test_empty_default_makes_a_variable_optional(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_KEY", raising=False)
    assert load_settings(write(tmp_path, "admin_key: ${NOPE_KEY:-}\n")).admin_key is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("upstreem: {}\n", "upstreem: unknown key"),
        ("tools:\n  required_tier:\n    rm: huge\n", "tools.required_tier.rm"),
        ("unknown_models: maybe\n", "unknown_models"),
        ("pins:\n  m: medium-ish\n", "pins.m"),
        ("upstream:\n  base_url: ftp://x\n", "upstream.base_url: expected an http(s) URL"),
        ('upstream:\n  base_url: "http://a b/v1"\n', "upstream.base_url: expected an http(s) URL"),
        ('upstream:\n  api_key: "sk-1\\r\\nx-injected: 1"\n', "upstream.api_key: contains a control character"),
        ("upstream:\n  unknown_fields: allow\n", "upstream.unknown_fields"),
        ("bench:\n  thresholds:\n    large: {speed: 1}\n", "unknown categories"),
        ("bench:\n  thresholds:\n    large: {json: 1.5}\n", "bench.thresholds.large.json"),
        ("bench:\n  thresholds:\n    medium: {json: -1}\n", "bench.thresholds.medium.json"),
        ("bench:\n  thresholds:\n    medium: {json: .nan}\n", "bench.thresholds.medium.json"),
        ("- a\n- b\n", "expected a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_bad_config_is_rejected_with_the_key_path(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_the_replicas_example_config_loads_and_selects_redis(monkeypatch):
    monkeypatch.setenv("GATEKEEPER_ADMIN_KEY", "adm")
    settings = load_settings(Path(__file__).parent.parent / "examples" / "replicas" / "gatekeeper.yaml")
    assert settings.store == "redis://redis:6379/0" and settings.lazy.max_concurrent == 2


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ("redis://:secret@cache:6380/2", "redis://:secret@cache:6380/2"),
        ("rediss://cache.example:6379/0", "rediss://cache.example:6379/0"),
        ("unix:///run/redis/redis.sock?db=2", "unix:///run/redis/redis.sock?db=2"),  # not a relative path
    ],
)
def test_a_redis_url_is_kept_as_a_url(tmp_path, store, expected):
    assert load_settings(write(tmp_path, f"store: {store}\n")).store == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("store: redis:///0\n", "store: expected a redis URL with a host"),
        ("store: redis://host:port/0\n", "store: bad port"),
        ("store: redis://host:6379/zero\n", "store: the database in a Redis URL is a number"),
        ("store: unix://\n", "store: expected a socket path"),
        ("store: postgres://db/profiles\n", "store: no store serves 'postgres'://"),
        ("pins:\n  'm@': large\n", "pins: 'm@': expected MODEL, MODEL@EFFORT or MODEL@*"),
        ("lazy:\n  max_concurrent: 0\n", "lazy.max_concurrent"),
        ("lazy:\n  lease_ttl_s: 0\n", "lazy.lease_ttl_s"),
    ],
)
def test_bad_store_pin_and_lazy_values_name_the_key(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_settings(write(tmp_path, text))


def test_settings_are_immutable():
    from gatekeeper.config import Settings

    with pytest.raises(Exception, match="frozen"):
        Settings().bench.retry_after_s = 1  # type: ignore[misc]


def test_a_store_path_that_is_a_directory_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"store: .* is a directory: name the store's file in it"):
        load_settings(write(tmp_path, f"store: {tmp_path}\n"))
