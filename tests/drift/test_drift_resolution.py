"""What a demotion does to tier resolution: per client, for everyone, and against a profile that
lands meanwhile; and that drift's re-measurement keeps to the lazy limits."""

from __future__ import annotations

from conftest import make_profile, seed_store, settings_for

from gatekeeper import Gatekeeper, Tier
from gatekeeper.drift.identity import ANONYMOUS
from gatekeeper.protocols.base import Call

OFFERED = {"count": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}
BAD = [Call("count", '{"n": "5"}', True)]


def fail(gk: Gatekeeper, *clients: str, times: int = 20) -> None:
    for _ in range(times):
        for client in clients:
            gk.drift.submit(gk.resolve("large-model", client=client), BAD, OFFERED, client)
    gk.drift.drain()


def seen(gk: Gatekeeper, client: str | None) -> tuple[Tier, str]:
    found = gk.resolve("large-model", client=client)
    return found.tier, found.source


def test_a_clients_demotion_applies_to_that_client_only(gk: Gatekeeper) -> None:
    fail(gk, "key:a")
    assert seen(gk, "key:a") == (Tier.MEDIUM, "demoted")
    assert seen(gk, "key:b") == (Tier.LARGE, "measured")
    assert seen(gk, ANONYMOUS) == (Tier.LARGE, "measured")
    assert seen(gk, None) == (Tier.LARGE, "measured")  # in-process callers, the console


def test_everyones_demotion_applies_to_every_caller(gk: Gatekeeper) -> None:
    fail(gk, "key:a", "key:b", "key:c")
    for client in ("key:z", ANONYMOUS, None):
        assert seen(gk, client) == (Tier.MEDIUM, "demoted")


def test_a_profile_landing_during_a_demotion_lowers_the_tier_further_never_lifts_it(
    gk: Gatekeeper, default_suite
) -> None:
    fail(gk, "key:a")
    gk.store.save([make_profile("large-model", Tier.LARGE, default_suite)])
    assert seen(gk, "key:a") == (Tier.MEDIUM, "demoted")  # the suite still passes: the demotion stands
    gk.store.save([make_profile("large-model", Tier.SMALL, default_suite)])
    assert seen(gk, "key:a") == (Tier.SMALL, "demoted")
    assert seen(gk, "key:b") == (Tier.SMALL, "measured")


def test_drifts_remeasurement_keeps_to_the_lazy_limits(upstream, store_path, default_suite) -> None:
    seed_store(store_path, make_profile("large-model", Tier.LARGE, default_suite))
    settings = settings_for(upstream.base_url, store_path, lazy={"allow": ["other-*"]})
    with Gatekeeper(settings) as gk:
        fail(gk, "key:a", "key:b", "key:c")
        assert seen(gk, None) == (Tier.MEDIUM, "demoted")
        history = gk.drift.report()["large-model@default"]["history"]
        assert history[-1]["event"] == "remeasure" and "lazy limits refuse" in history[-1]["detail"]
        assert gk.progress() == []  # nothing was measured
