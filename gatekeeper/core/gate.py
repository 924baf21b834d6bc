"""A request body against the tool rules, in two steps around the tier's resolution.

`check_fields` runs before the tier is known: the codec walks the body with a policy that hides
nothing, so every field it does not know, and every malformed one, is refused (or dropped, under
`upstream.unknown_fields: drop`) before anything is resolved: a request that will be refused never
starts a measurement. It costs a second walk of the body, so it runs only where resolving would
start one (`check_before_measuring`: no pin, no valid profile); for a known pair the gate's own
walk refuses the same fields. `gate_resolved` runs once the tier is known and hides what the tier may not
see. The same walk, recorded, tells capability routing which tools a body offers (`Recorder`).

Both sit here, below `core.gatekeeper` and `core.admit`, which both use them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from gatekeeper.core.resolver import Resolution, TierResolver
from gatekeeper.errors import ToolChoiceBlocked
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.gate import Gated
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy


class Recorder(ToolPolicy):
    """A policy that admits everything and remembers what it was asked about."""

    def __init__(self, base: ToolPolicy) -> None:
        # No super().__init__(): nothing is looked up here.
        self.default_tier, self.unknown_fields = base.default_tier, base.unknown_fields
        self.servers, self.named_groups = base.servers, base.named_groups
        self.tools: list[str | ToolId] = []
        self.groups: list[str] = []

    def required_tier(self, tool: str | ToolId) -> Tier:
        return Tier.SMALL

    def allows(self, tier: Tier, tool: str | ToolId) -> bool:
        self.tools.append(tool)
        return True

    def judges_arguments(self, tool: str | ToolId) -> bool:
        return False

    def narrows(self) -> bool:
        return False

    def narrowed(self, tier: Tier, tool: str | ToolId, schema: Mapping[str, Any]) -> dict[str, Any] | None:
        return None

    def rule_hiding_part_of(self, group: str, tier: Tier) -> str | None:
        self.groups.append(group)
        return None


def check_fields(codec: Codec, body: dict[str, Any], policy: ToolPolicy) -> Recorder:
    """Check every field of `body` (in place: under `drop` an unknown field is dropped here, and
    logged once) before its tier is resolved. Hides nothing. Raises RequestInvalid; a tool choice
    that no tier could satisfy is left to `gate_resolved`, which names the tier it applies."""
    recorder = Recorder(policy)
    with contextlib.suppress(ToolChoiceBlocked):
        codec.gate(body, Tier.LARGE, recorder)
    return recorder


def check_before_measuring(
    codec: Codec, body: dict[str, Any], policy: ToolPolicy, resolver: TierResolver, model: str, effort: str | None
) -> None:
    """`check_fields` when resolving `model@effort` would start a measurement."""
    if resolver.lookup(model, effort) is None:
        check_fields(codec, body, policy)


def gate_resolved(codec: Codec, body: dict[str, Any], resolution: Resolution, policy: ToolPolicy) -> Gated:
    """Gate `body` in place at `resolution`'s tier (no log context bound: `Gatekeeper.gate` is
    called in process, outside any request scope)."""
    try:
        return codec.gate(body, resolution.tier, policy)
    except ToolChoiceBlocked as exc:
        exc.source = resolution.source
        raise
