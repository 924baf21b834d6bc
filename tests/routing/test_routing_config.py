"""The `routing:` section: opt-in, validated with key paths."""

from __future__ import annotations

import pytest

from gatekeeper.config import Settings, load_settings
from gatekeeper.core.route_choice import RoutingRules
from gatekeeper.errors import ConfigError


def test_without_a_routing_section_there_is_no_routing():
    assert Settings().routing is None


def test_an_empty_routing_section_escalates_only(tmp_path):
    path = tmp_path / "gatekeeper.yaml"
    path.write_text("routing: {}\n")
    assert RoutingRules.of(load_settings(path).routing) == RoutingRules(escalate_effort=True, economize_effort=False)


def test_the_issue_example_reads_as_written(tmp_path):
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(
        "routing:\n"
        "  escalate_effort: true\n"
        "  economize_effort: false\n"
        "  fallback:\n"
        '    "gemma-*": [big-model, other-model]\n'
        "  max_effort: high\n"
    )
    rules = RoutingRules.of(load_settings(path).routing)
    assert rules.fallback == (("gemma-*", ("big-model", "other-model")),) and rules.max_effort == "high"


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        ("routing:\n  max_effort: default\n", "routing.max_effort: Input should be 'none', 'minimal'"),
        ("routing:\n  fallback:\n    'gemma-*': []\n", "routing.fallback: 'gemma-*': expected a list of model names"),
        ("routing:\n  fallback:\n    'gemma-*': big-model\n", "routing.fallback.gemma-*: Input should be a valid list"),
        (
            "routing:\n  fallback:\n    '*': [big@high]\n",
            "'big@high': expected a model name, not model@effort (write 'big')",
        ),
        ("routing:\n  escalate: true\n", "routing.escalate: unknown key"),
        ("routing:\n  economize_effort: sometimes\n", "routing.economize_effort: Input should be a valid boolean"),
    ],
)
def test_bad_routing_is_refused_naming_the_key(tmp_path, yaml, message):
    path = tmp_path / "gatekeeper.yaml"
    path.write_text(yaml)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message in str(caught.value)
