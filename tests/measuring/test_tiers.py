"""Scores -> tier, at the edges of the seed's thresholds."""

import pytest

from gatekeeper.rules.tiers import Thresholds, Tier, compute_tier


@pytest.mark.parametrize(
    ("scores", "tier"),
    [
        ({"toolCalling": 0.9, "instruction": 0.85, "json": 0.85}, Tier.LARGE),
        ({"toolCalling": 0.8999, "instruction": 1, "json": 1}, Tier.MEDIUM),
        ({"toolCalling": 1, "instruction": 0.8499, "json": 1}, Tier.MEDIUM),
        ({"toolCalling": 0.6, "instruction": 0, "json": 0.5}, Tier.MEDIUM),
        ({"toolCalling": 0.5999, "instruction": 1, "json": 1}, Tier.SMALL),
        ({"toolCalling": 1, "instruction": 1, "json": 0.4999}, Tier.SMALL),
        ({}, Tier.SMALL),
    ],
)
def test_seed_thresholds(scores, tier):
    assert compute_tier(scores) == tier


def test_thresholds_are_configurable():
    strict = Thresholds(large={"toolCalling": 1.0}, medium={"toolCalling": 0.95})
    assert compute_tier({"toolCalling": 0.96}, strict) == Tier.MEDIUM


def test_tier_order():
    assert Tier.LARGE.allows(Tier.MEDIUM) and Tier.MEDIUM.allows(Tier.MEDIUM)
    assert not Tier.SMALL.allows(Tier.MEDIUM)
