"""The request step every front end shares, written once: parse a body with its protocol's codec,
check its fields, resolve the pair's tier, gate the tools (the two gating steps: core/gate.py).
A body refused for its fields is refused before its tier is resolved: it never starts a measurement.

The proxy (server/pipeline.py), the in-process request step (inprocess/wrap.py `gate_body`, used
by the SDK wrappers and the LiteLLM hook) and `Gatekeeper.gate` all end in `gate_resolved`, the
one place a `ToolChoiceBlocked` learns where its tier came from. Every decision of one request is
made with one settings snapshot (`Gatekeeper.snapshot()`): the tier and the tool rules always come
from the same config, whatever a reload does meanwhile.

What is learnt is bound to the log context (model, effort, tier, source, tools kept and hidden),
so every line logged for the request carries it; callers scope it (`logs.request_scope`). What a
front end answers with (the proxy's headers and span) it reads from the request's own record,
`Admission`, never back from the log context: renaming a log key changes no HTTP header.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gatekeeper.core.budget import Budgeted, apply_budget, routed_for_budget
from gatekeeper.core.gate import check_before_measuring, gate_resolved
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip
from gatekeeper.protocols.base import Allowed, Codec, Offered, RequestInfo
from gatekeeper.protocols.gate import Gated
from gatekeeper.rules.clients import ClientPolicy, ceiling
from gatekeeper.rules.tools import ToolId, ToolPolicy
from gatekeeper.store.profile import DEFAULT_EFFORT

if TYPE_CHECKING:
    from gatekeeper.core.gatekeeper import Gatekeeper, Resolution, Snapshot
    from gatekeeper.core.router import Route


@dataclass(frozen=True, slots=True)
class Admitted:
    """A gated request: what its body says, the tier it gets, and what gating kept and hid."""

    info: RequestInfo  # as sent upstream: the routed model and effort when routed
    resolution: Resolution  # of the pair the request is sent to
    gated: Gated
    policy: ToolPolicy  # the tool policy the request was gated with (the pair's)
    route: Route | None = None  # the routing decision (None: no `routing:` section, or no tools)
    budget: Budgeted | None = None  # what the tool budget did (tools.budget; gatekeeper.core.budget)


@dataclass(slots=True)
class Admission:
    """One request's admission as far as it got, filled as it goes: what the body asks (after
    parse), the pair's resolution and route (after resolving and routing), the `Admitted` (after
    gating). A refused request keeps what was learnt before the refusal, so its answer can still
    say which tier refused it."""

    asked: RequestInfo | None = None  # the body's own model, effort and stream flag (before routing)
    resolution: Resolution | None = None  # of the pair the request is sent to
    route: Route | None = None
    admitted: Admitted | None = None


def admit(gk: Gatekeeper, codec: Codec, body: dict[str, Any], snapshot: Snapshot | None = None) -> Admitted:
    """Parse, resolve (sync: under `wait` this blocks) and gate `body` in place.

    Raises RequestInvalid, NotMeasured (`unknown_models: reject`) and ToolChoiceBlocked."""
    snap = snapshot or gk.snapshot()
    info = parse(codec, body, snap)
    return _gate(snap, codec, body, info, gk.resolve(info.model, info.effort, snapshot=snap))


async def aadmit(
    gk: Gatekeeper,
    codec: Codec,
    body: dict[str, Any],
    snapshot: Snapshot | None = None,
    *,
    route: bool = False,
    client: str | None = None,
    client_policy: str | None = None,
    into: Admission | None = None,
) -> Admitted:
    """`admit` for async code: never blocks the event loop. `route` (the proxy): apply capability
    routing (`routing:`) first, rewriting `body` for the routed pair (gatekeeper.core.router).
    `client`: the caller's drift identity (gatekeeper.drift.identity), whose demotions apply;
    `client_policy`: the name of the configured client it is (`clients:`), whose rules apply too.
    `into`: the request's record, filled step by step (kept when a step raises)."""
    snap = snapshot or gk.snapshot()
    into = into if into is not None else Admission()
    info = into.asked = parse(codec, body, snap)
    resolution = await gk.aresolve(info.model, info.effort, client, snapshot=snap)
    return _gate(snap, codec, body, info, resolution, route, client, client_policy, into)


def parse(codec: Codec, body: dict[str, Any], snap: Snapshot) -> RequestInfo:
    """The body's model, effort and stream flag; when resolving the pair would measure it, every
    field is checked first (RequestInvalid)."""
    info = codec.parse(body)
    # Client strings, on every line this request logs: capped (a 1 MB model name costs 256 bytes).
    logs.bind(model=clip(info.model), effort=clip(info.effort or "default"))
    check_before_measuring(codec, body, snap.policy, snap.resolver, info.model, info.effort)
    return info


def _gate(
    snap: Snapshot,
    codec: Codec,
    body: dict[str, Any],
    info: RequestInfo,
    resolution: Resolution,
    route: bool = False,
    client: str | None = None,
    client_policy: str | None = None,
    into: Admission | None = None,
) -> Admitted:
    into = into if into is not None else Admission()
    rules = snap.clients.rules.get(client_policy) if client_policy is not None else None
    routed = snap.router.route_body(codec, body, info, resolution, client) if route else None
    if routed is not None and routed.routed:
        info = RequestInfo(routed.model, None if routed.effort == DEFAULT_EFFORT else routed.effort, info.stream)
        resolution = routed.resolution  # with this client's demotion: candidates are judged with it
        logs.bind(routed=routed.pair, routed_reason=routed.reason)
    # The pair's policy: the tier rules, and `tools.requires` judged on its measured bounds.
    policy = routed.policy if routed is not None else snap.router.policy_for(resolution)
    if rules is not None and client_policy is not None:  # the client's own rules: the stricter apply
        resolution = dataclasses.replace(resolution, tier=ceiling(resolution.tier, rules))
        policy = ClientPolicy(policy, client_policy, rules)
        logs.bind(client_policy=client_policy)
    into.resolution, into.route = resolution, routed
    logs.bind(tier=resolution.tier.value, source=resolution.source)
    gated = gate_resolved(codec, body, resolution, policy)
    gated, budgeted = apply_budget(snap.settings, codec, body, resolution, policy, gated)
    if routed is not None and routed.routed and budgeted.action is None and snap.settings.tools.budget == "route":
        budgeted = routed_for_budget(routed, budgeted)
    logs.bind(tools_kept=gated.kept, tools_hidden=gated.hidden)
    into.admitted = Admitted(info, resolution, gated, policy, routed, budgeted)
    return into.admitted


def allowed_calls(codec: Codec, body: Any, admitted: Admitted | None, explain: bool) -> Allowed:
    """What the answer to `body` may carry, for every front end's answer side (the proxy, the
    in-process transport, the LiteLLM hook): the tools the gated body offers, at the tier and
    under the policy `admitted` found, and what replaces a removed call (`explain`; where, for a
    structured answer). Without `admitted` (a call that offered no tools), nothing: every call
    in the answer is removed."""
    structured = isinstance(body, dict) and codec.asks_structured(body)
    if admitted is None:
        return Allowed(Offered(), explain=explain, structured=structured)
    return Allowed(
        codec.offered(body), admitted.resolution.tier, admitted.policy, explain, admitted.gated.servers, structured
    )


@dataclass(frozen=True, slots=True)
class Decision:
    """What one resolved pair may see, for front ends that filter a list of tools by name (the
    `gated` wrappers): its resolution and the policy of its pair, from one settings snapshot."""

    resolution: Resolution
    policy: ToolPolicy

    def allows(self, tool: str | ToolId) -> bool:
        return self.policy.allows(self.resolution.tier, tool)

    def admits_call(self, tool: str | ToolId, arguments: str | Mapping[str, Any] | None) -> bool:
        """Whether one call of `tool` with `arguments` is admitted (`tools.arguments` judged too)."""
        return self.policy.admits_call(self.resolution.tier, tool, arguments)


def decide(gk: Gatekeeper, model: str, effort: str | None) -> Decision:
    """Resolve the pair (sync; under `wait` this blocks) and take its policy, with one snapshot."""
    snap = gk.snapshot()
    resolution = gk.resolve(model, effort, snapshot=snap)
    return Decision(resolution, snap.router.policy_for(resolution))


async def adecide(gk: Gatekeeper, model: str, effort: str | None) -> Decision:
    """`decide` for async code."""
    snap = gk.snapshot()
    resolution = await gk.aresolve(model, effort, snapshot=snap)
    return Decision(resolution, snap.router.policy_for(resolution))
