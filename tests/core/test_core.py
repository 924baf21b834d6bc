"""The Gatekeeper core from sync and async code: resolution order, policies, single flight."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import answers
import pytest
from conftest import agent_or_suite, make_profile, seed_store, settings_for, wait_until
from scripted import ScriptedServer, SuiteScript

from gatekeeper import Gatekeeper, NotMeasured, Profile, Tier
from gatekeeper.errors import RequestInvalid


def measuring(default_suite, delay_s=0.0) -> ScriptedServer:
    script = SuiteScript(default_suite)
    return ScriptedServer(agent_or_suite(script, answers.perfect, lambda body: {"content": "x"}), delay_s=delay_s)


def test_sync_fail_closed_returns_at_once_while_measuring(store_path, default_suite):
    with measuring(default_suite, delay_s=1.0) as upstream:
        gk = Gatekeeper(settings_for(upstream.base_url, store_path))
        assert gk.tier_for("m") == (Tier.SMALL, "pending")
        assert gk.lookup("m") is None  # returned while the measurement was still running
        wait_until(lambda: gk.lookup("m"), "the measurement of m")
        assert gk.tier_for("m") == (Tier.LARGE, "measured")
        gk.close()


def test_many_threads_share_one_measurement(store_path, default_suite):
    with measuring(default_suite, delay_s=0.05) as upstream:
        gk = Gatekeeper(settings_for(upstream.base_url, store_path, unknown_models="wait", wait_timeout_s=20))
        with ThreadPoolExecutor(20) as pool:
            tiers = list(pool.map(lambda _: gk.tier_for("m"), range(20)))
        gk.close()
    assert set(tiers) == {(Tier.LARGE, "measured")}
    first_steps = [b for b in upstream.requests if len(b["messages"]) == 1]
    assert len(first_steps) == len(default_suite.tests)


async def test_async_wait_policy_does_not_block_the_event_loop(store_path, default_suite):
    with measuring(default_suite, delay_s=0.05) as upstream:
        gk = Gatekeeper(settings_for(upstream.base_url, store_path, unknown_models="wait", wait_timeout_s=20))
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        assert await gk.atier_for("m") == (Tier.LARGE, "measured")
        task.cancel()
        gk.close()
    assert ticks > 5


def test_reject_policy_raises_until_measured(store_path, default_suite):
    with measuring(default_suite) as upstream:
        gk = Gatekeeper(settings_for(upstream.base_url, store_path, unknown_models="reject"))
        with pytest.raises(NotMeasured, match="has not been measured"):
            gk.tier_for("m", "low")
        wait_until(lambda: gk.lookup("m", "low"), "the measurement of m@low")
        assert gk.tier_for("m", "low") == (Tier.LARGE, "measured")
        gk.close()


def test_filter_tools_uses_the_resolved_tier(store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.MEDIUM, default_suite))
    gk = Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path))
    tools = [{"type": "function", "function": {"name": n}} for n in ("read", "write_file", "execute_command")]
    assert [t["function"]["name"] for t in gk.filter_tools("m", None, tools)] == ["read", "write_file"]


def test_a_profile_measured_at_low_is_never_served_for_xhigh(store_path, default_suite):
    seed_store(store_path, make_profile("m", Tier.LARGE, default_suite, effort="low"))
    gk = Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path))
    assert gk.lookup("m", "low").tier == Tier.LARGE
    assert gk.lookup("m", "xhigh") is None and gk.lookup("m") is None


# -- the core with a fake backend: no HTTP, no sleeps ---------------------------------------------

from fake_backend import FakeBackends  # noqa: E402

from gatekeeper import ConfigError  # noqa: E402


def fake_gk(store_path, suite, backends: FakeBackends, **changes) -> Gatekeeper:
    return Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path, **changes), backend_factory=backends.factory)


def measured(gk: Gatekeeper, model: str, effort: str | None = None, timeout_s: float = 20) -> Profile:
    return gk.measure(model, effort).result(timeout=timeout_s)


def test_an_injected_backend_measures_without_http(store_path, default_suite):
    backends = FakeBackends(default_suite)
    with fake_gk(store_path, default_suite, backends, unknown_models="wait", wait_timeout_s=20) as gk:
        assert gk.tier_for("m") == (Tier.LARGE, "measured")
    assert backends.suite_runs("m") == 1


def test_a_name_outside_the_allowlist_is_never_measured(store_path, default_suite):
    backends = FakeBackends(default_suite)
    with fake_gk(store_path, default_suite, backends, lazy={"allow": ["gpt-*"]}) as gk:
        assert gk.tier_for("evil-model") == (Tier.SMALL, "unmeasured")
        assert gk.tier_for("gpt-x", None)[1] == "pending"
        measured(gk, "gpt-x")
    assert backends.calls["evil-model"] == 0


def test_unknown_names_cannot_grow_the_store_past_max_models(store_path, default_suite):
    seed_store(store_path, *(make_profile(f"known-{i}", Tier.SMALL, default_suite) for i in range(3)))
    backends = FakeBackends(default_suite)
    with fake_gk(store_path, default_suite, backends, lazy={"max_models": 3}) as gk:
        assert gk.tier_for("new-name") == (Tier.SMALL, "unmeasured")
        assert gk.tier_for("known-0", "low")[1] == "pending"  # a known model may add a level
        measured(gk, "known-0", "low")
    assert backends.calls["new-name"] == 0


def test_efforts_outside_the_closed_set_are_refused_not_measured(store_path, default_suite):
    backends = FakeBackends(default_suite)
    with fake_gk(store_path, default_suite, backends) as gk:
        for effort in ("x" * 100, "e0", "LOW"):
            with pytest.raises(RequestInvalid, match="is not one of"):
                gk.tier_for("m", effort)
    assert backends.calls["m"] == 0


def test_measurements_beyond_the_cap_wait_their_turn(store_path, default_suite):
    backends = FakeBackends(default_suite, held=True)
    with fake_gk(store_path, default_suite, backends, lazy={"max_concurrent": 1}) as gk:
        first = gk.measure("a")
        wait_until(lambda: backends.calls["a"], "the first measurement to call its backend")
        second = gk.measure("b")
        wait_until(lambda: "b@default" in gk._scheduler.queued, "the second measurement to be queued")
        assert backends.calls["b"] == 0
        backends.release()
        assert first.result(20).tier == second.result(20).tier == Tier.LARGE
    assert backends.peak_models == 1


def test_a_failed_measurement_backs_off_and_an_admin_can_still_measure(store_path, default_suite):
    backends = FakeBackends(default_suite, fail=True)
    with fake_gk(store_path, default_suite, backends, bench={"retry_after_s": 60, "max_retries": 0}) as gk:
        with pytest.raises(Exception, match="scripted failure"):
            gk.measure("m").result(20)
        calls = backends.calls["m"]
        assert gk.tier_for("m") == (Tier.SMALL, "unmeasured")  # no new flight while backing off
        assert backends.calls["m"] == calls
        backends.fail = False
        assert measured(gk, "m").tier == Tier.LARGE


def test_a_pin_on_model_at_effort_never_pins_a_model_named_like_it(store_path, default_suite):
    gk = Gatekeeper(
        settings_for(
            "http://127.0.0.1:9/v1", store_path, pins={"m@low": "large", "v@1@*": "medium"}, extra_efforts=["1"]
        )
    )
    with gk:
        assert gk.tier_for("m", "low") == (Tier.LARGE, "pinned")
        assert gk.lookup("m@low", "high") is None and gk.lookup("m@low") is None
        assert gk.lookup("v@1", "high").tier == Tier.MEDIUM
        assert gk.lookup("v", "1") is None


def test_profiles_report_validity_and_source(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("a", Tier.LARGE, default_suite),
        make_profile("old", Tier.LARGE, default_suite, tests_hash="00000000"),
        make_profile("p", Tier.SMALL, default_suite),
    )
    with Gatekeeper(settings_for("http://127.0.0.1:9/v1", store_path, pins={"p": "large"})) as gk:
        entries = gk.profiles()
    assert {k: (e.valid, e.source) for k, e in entries.items()} == {
        "a@default": (True, "measured"),
        "old@default": (False, "stale"),
        "p@default": (True, "pinned"),
    }
    assert entries["a@default"].to_json()["valid"] is True


def write_config(path, text: str):
    path.write_text(text)
    return path


def test_reload_replaces_pins_and_a_bad_config_is_refused_with_the_old_kept(tmp_path, default_suite):
    config = write_config(tmp_path / "gk.yaml", "store: s.json\npins:\n  m: small\n")
    with Gatekeeper.from_config(config) as gk:
        assert gk.tier_for("m") == (Tier.SMALL, "pinned")
        write_config(config, "store: s.json\npins:\n  m: large\n")
        gk.reload()
        assert gk.tier_for("m") == (Tier.LARGE, "pinned")
        write_config(config, "store: s.json\npins:\n  m: huge\n")
        with pytest.raises(ConfigError, match=r"pins\.m"):
            gk.reload()
        assert gk.tier_for("m") == (Tier.LARGE, "pinned")
        write_config(config, "store: other.json\n")
        with pytest.raises(ConfigError, match="store: cannot change"):
            gk.reload()


async def test_a_request_in_flight_finishes_under_the_settings_it_started_with(tmp_path, default_suite):
    config = write_config(
        tmp_path / "gk.yaml",
        "store: s.json\nunknown_models: wait\nwait_timeout_s: 20\ntools:\n  required_tier:\n    tool_a: medium\n",
    )
    backends = FakeBackends(default_suite, answers.no_tool_calls, held=True)
    tools = [{"type": "function", "function": {"name": n}} for n in ("tool_a", "tool_b")]
    with Gatekeeper.from_config(config, backend_factory=backends.factory) as gk:
        before = asyncio.ensure_future(gk.afilter_tools("m", None, tools))
        while backends.calls["m"] == 0:
            await asyncio.sleep(0.01)
        write_config(config, "store: s.json\ntools:\n  required_tier:\n    tool_b: medium\n")
        gk.reload()
        backends.release()
        kept = await before
        assert gk.lookup("m").tier == Tier.SMALL
        assert [t["function"]["name"] for t in kept] == ["tool_b"]  # the old rules hid tool_a
        assert [t["function"]["name"] for t in gk.filter_tools("m", None, tools)] == ["tool_a"]
