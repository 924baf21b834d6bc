"""What one proxy request has learnt, kept on its ASGI scope for as long as it is served.

The app's `RequestScope` puts a fresh `Served` on every request's scope; the pipeline fills it
(the request id, the `Admission` of core/admit.py, what the answer side removed, the upstream's
status); the answer's `x-gatekeeper-*` headers, error answers' included, and the request's span
attributes are read from it. The log context carries the same facts for log lines, but nothing
is read back from it: a log key is free to change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from starlette.requests import HTTPConnection

from gatekeeper.core.admit import Admission
from gatekeeper.observe.redact import clip
from gatekeeper.observe.telemetry import Attribute

_KEY = "gatekeeper.served"  # in the scope's `state`, which Starlette exposes as `request.state`


@dataclass(slots=True)
class Served:
    request_id: str | None = None
    admission: Admission = field(default_factory=Admission)
    blocked_calls: list[str] | None = None  # calls removed from the answer
    upstream_status: int | None = None
    # The `request` log line of a plain answer, until the answer is written: the app's
    # `RequestScope` writes it if the write never ended (it failed, or the task was cancelled).
    line: dict[str, Any] | None = None

    def tier_headers(self, routed_header: str | None) -> dict[str, str]:
        """`x-gatekeeper-tier` and `-profile` once the tier is known, and `-routed` (given, as
        the pipeline encodes it) when routing chose another pair."""
        resolution = self.admission.resolution
        if resolution is None:
            return {}
        headers = {"x-gatekeeper-tier": resolution.tier.value, "x-gatekeeper-profile": resolution.source}
        if routed_header is not None:
            headers["x-gatekeeper-routed"] = routed_header
        return headers

    @property
    def model(self) -> str | None:
        """The model the client asked for (capped: a client's string)."""
        asked = self.admission.asked
        return clip(asked.model) if asked is not None else None

    def span_attributes(self) -> dict[str, Attribute | None]:
        """The request span's `gatekeeper.*` attributes (observe/telemetry.py lists them)."""
        admission = self.admission
        asked, resolution, route, admitted = admission.asked, admission.resolution, admission.route, admission.admitted
        routed = route is not None and route.routed
        return {
            "gatekeeper.effort": clip(asked.effort or "default") if asked is not None else None,
            "gatekeeper.tier": resolution.tier.value if resolution is not None else None,
            "gatekeeper.profile": resolution.source if resolution is not None else None,
            "gatekeeper.tools.kept": [str(t) for t in admitted.gated.kept] if admitted is not None else None,
            "gatekeeper.tools.hidden": [str(t) for t in admitted.gated.hidden] if admitted is not None else None,
            "gatekeeper.calls.blocked": [str(c) for c in self.blocked_calls] if self.blocked_calls else None,
            "gatekeeper.routed": route.pair if route is not None and routed else None,
            "gatekeeper.routed.reason": route.reason if route is not None and routed else None,
            "gatekeeper.upstream.status": self.upstream_status,
        }


def served(connection: HTTPConnection) -> Served:
    """The request's record (a fresh one outside the app's `RequestScope`, as in unit tests)."""
    state = connection.scope.setdefault("state", {})
    found = state.get(_KEY)
    if found is None:
        found = state[_KEY] = Served()
    return found  # type: ignore[no-any-return]


def start(state: dict[str, object]) -> Served:
    """A fresh record for a request whose scope `state` is given."""
    record = state[_KEY] = Served()
    return record
