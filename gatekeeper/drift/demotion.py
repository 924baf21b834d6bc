"""What a demotion is and what it rests on: the breach that started it, its record as the
replicas share it (a store's DemotionBoard, store/base.py), and one pair's evidence (PairState)."""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from gatekeeper.drift.sequential import Cusum, Pooled, Tally
from gatekeeper.drift.window import Fault, Window
from gatekeeper.rules.tiers import Tier
from gatekeeper.store.profile import Profile

MAX_CLIENTS = 1024  # identities with evidence kept per pair (least recently seen dropped first)
_HISTORY = 50  # events kept per pair

Scope = str | None  # whom a demotion applies to: None = everyone, else one client identity


class Served(Protocol):
    """What the monitor needs of a tier resolution (core's `Resolution` fits)."""

    @property
    def key(self) -> str: ...
    @property
    def tier(self) -> Tier: ...
    @property
    def source(self) -> str: ...
    @property
    def profile(self) -> Profile | None: ...


def stamp_of(profile: Profile | None) -> str | None:
    return profile.tested_at if profile is not None else None


def iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


def slot_of(key: str, client: Scope) -> str:
    """A demotion's name among the replicas: the pair, and the client when it is only theirs."""
    return key if client is None else f"{key}\t{client}"


@dataclass(frozen=True)
class Breach:
    """One fault kind whose evidence passed its threshold: the reason of a verdict."""

    fault: Fault
    score: float
    threshold: float
    ceiling: float
    clients: int  # identities whose calls carry the evidence

    def to_json(self) -> dict[str, Any]:
        return {
            "fault": self.fault.value,
            "score": round(self.score, 2),
            "threshold": round(self.threshold, 2),
            "ceiling": self.ceiling,
            "clients": self.clients,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Breach:
        return cls(
            Fault(raw["fault"]),
            float(raw.get("score", 0.0)),
            float(raw.get("threshold", 0.0)),
            float(raw["ceiling"]),
            int(raw.get("clients", 1)),
        )

    def __str__(self) -> str:
        who = f"{self.clients} clients" if self.clients != 1 else "one client"
        return f"{self.fault.value} evidence {self.score:.1f} >= {self.threshold:.1f} (ceiling {self.ceiling}; {who})"


@dataclass(frozen=True)
class Demotion:
    key: str
    client: Scope
    from_tier: Tier
    to_tier: Tier
    at: float
    stamp: str | None  # the profile in force when it began
    breaches: tuple[Breach, ...]
    examples: tuple[dict[str, Any], ...]
    window: dict[str, Any]

    @property
    def slot(self) -> str:
        return slot_of(self.key, self.client)

    @property
    def reason(self) -> str:
        return "; ".join(str(b) for b in self.breaches)

    def to_record(self) -> dict[str, Any]:
        """As shared with other replicas (a DemotionBoard: store/redis_demotions.py)."""
        return {
            "slot": self.slot,
            "key": self.key,
            "client": self.client,
            "fromTier": self.from_tier.value,
            "toTier": self.to_tier.value,
            "at": self.at,
            "stamp": self.stamp,
            "breaches": [b.to_json() for b in self.breaches],
            "examples": list(self.examples),
            "window": self.window,
        }

    @classmethod
    def from_record(cls, raw: dict[str, Any]) -> Demotion:
        client = raw.get("client")
        return cls(
            str(raw["key"]),
            str(client) if client is not None else None,
            Tier(raw["fromTier"]),
            Tier(raw["toTier"]),
            float(raw["at"]),
            raw.get("stamp"),
            tuple(Breach.from_json(b) for b in raw["breaches"]),
            tuple(raw.get("examples") or ()),
            dict(raw.get("window") or {}),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "client": self.client or "everyone",
            "fromTier": self.from_tier.value,
            "toTier": self.to_tier.value,
            "at": iso(self.at),
            "reason": self.reason,
            "breaches": [b.to_json() for b in self.breaches],
            "examples": list(self.examples),
            "window": self.window,
            "profileTestedAt": self.stamp,
        }


@dataclass
class PairState:
    window: Window  # the figures shown; verdicts are the tests'
    tier: Tier = Tier.SMALL  # the tier whose ceilings the pair is judged on (its profile's or pin's)
    source: str = "measured"  # "measured" | "pinned"
    stamp: str | None = None
    tests: dict[Fault, Cusum] = field(default_factory=dict)
    pooled: Pooled = field(default_factory=Pooled)
    own: OrderedDict[str, dict[Fault, float]] = field(default_factory=OrderedDict)
    restoring: dict[Scope, Tally] = field(default_factory=dict)  # the calls since each demotion in force
    alarmed: set[Scope] = field(default_factory=set)  # scopes drifting where no demotion can follow
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=_HISTORY))

    def own_scores(self, client: str) -> dict[Fault, float]:
        scores = self.own.get(client)
        if scores is None:
            if len(self.own) >= MAX_CLIENTS:
                gone, _ = self.own.popitem(last=False)
                self.alarmed.discard(gone)
            scores = self.own[client] = {}
        self.own.move_to_end(client)
        return scores

    def reset_evidence(self) -> None:
        self.pooled.reset()
        self.own.clear()
        self.alarmed.clear()


def whom(scope: Scope) -> str:
    return "everyone" if scope is None else f"client {scope}"
