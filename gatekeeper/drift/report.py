"""The drift report of one pair: its window's figures, each fault's rate against its ceiling and
its test's standing, and the demotions in force (GET /admin/drift, the console)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.drift.demotion import Demotion, PairState, Scope
from gatekeeper.drift.window import DriftSettings, Fault


def describe(pair: PairState, settings: DriftSettings, demoted: Mapping[Scope, Demotion], now: float) -> dict[str, Any]:
    """One pair's drift report, as `DriftMonitor.report` and the admin API show it."""
    figures = pair.window.figures(now)
    drop = settings.min_clients - 1
    ceilings = settings.ceilings_for(pair.tier)
    demotions = dict(demoted)  # scope -> the demotion in force
    everyone = demotions.pop(None, None)

    def shown(demotion: Demotion) -> dict[str, Any]:
        tally = pair.restoring.get(demotion.client)
        since = tally.to_json(drop if demotion.client is None else 0) if tally is not None else None
        return {**demotion.to_json(), "since": since}

    rates = {}
    for fault in Fault:
        count, test = figures.faults.get(fault, 0), pair.tests.get(fault)
        rates[fault.value] = {
            "count": count,
            "rate": round(count / figures.calls, 4) if figures.calls else 0.0,
            "ceiling": ceilings.of(fault),
            "score": round(pair.pooled.standing(fault, drop), 2) if test is not None else None,
            "threshold": round(test.threshold, 2) if test is not None else None,
        }
    return {
        "tier": pair.tier.value,
        "source": pair.source,
        "window": {**figures.to_json(), "maxCalls": settings.window_calls, "maxAgeS": settings.window_s},
        "rates": rates,
        "clients": len(pair.own),
        "drifting": bool(everyone or demotions or pair.alarmed),
        "demoted": shown(everyone) if everyone is not None else None,
        "clientsDemoted": {client: shown(d) for client, d in sorted(demotions.items()) if client is not None},
        "history": list(pair.history),
    }
