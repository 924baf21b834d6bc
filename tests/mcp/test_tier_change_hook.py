"""Gatekeeper.on_tier_change: the hook the gateway's list_changed notifications hang on."""

from __future__ import annotations

from pathlib import Path

import yaml
from conftest import make_profile

from gatekeeper.core.gatekeeper import Gatekeeper
from gatekeeper.rules.tiers import Tier


def test_listeners_hear_a_landed_profile_a_removal_and_a_reload(tmp_path: Path, default_suite):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(yaml.safe_dump({"store": str(tmp_path / "p.json"), "pins": {"m": "small"}}))
    heard: list[str] = []
    with Gatekeeper.from_config(config) as gk:

        def broken() -> None:
            raise RuntimeError("a listener that fails")

        gk.on_tier_change(broken)  # must not stop the others, nor the change itself
        remove = gk.on_tier_change(lambda: heard.append("changed"))
        # A listener may hear one change more than once (the store and the core both say so).
        gk.store.save([make_profile("x", Tier.LARGE, default_suite)])
        assert heard and gk.resolve("x").tier is Tier.LARGE
        before = len(heard)
        gk.invalidate("x")
        assert len(heard) > before
        before = len(heard)
        config.write_text(yaml.safe_dump({"store": str(tmp_path / "p.json"), "pins": {"m": "large"}}))
        gk.reload()
        assert len(heard) > before and gk.resolve("m").tier is Tier.LARGE
        before = len(heard)
        remove()
        gk.store.save([make_profile("x", Tier.LARGE, default_suite)])
        assert len(heard) == before
