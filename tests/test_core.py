"""The Gatekeeper core from sync and async code: resolution order, policies, single flight."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

import answers
from conftest import agent_or_suite, make_profile, seed_store, settings_for, wait_until
from scripted import ScriptedServer, SuiteScript
from gatekeeper import Gatekeeper, NotMeasured, Tier


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
