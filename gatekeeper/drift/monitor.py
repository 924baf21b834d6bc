"""The drift monitor: one rolling window per `model@effort`, demotions, and their side effects.

The request path only appends to a queue (`submit`: a deque append and, when the worker sleeps,
waking it); a worker thread classifies the calls, judges the windows and demotes. Tier
resolution asks `demotion(key, profile)`: one dict lookup.

A demotion lowers a measured pair by one tier until a newer profile of it lands (the
re-measurement it schedules, or any other) or an admin clears it. Pins are never demoted: a
drifting pinned pair is logged and shown, nothing more. `small` has no lower tier: same.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog

from gatekeeper import metrics
from gatekeeper.drift.window import Breach, DriftSettings, Fault, Schema, Window, breaches, observe, rates, z_for
from gatekeeper.protocols.base import Call
from gatekeeper.store.profile import Profile
from gatekeeper.tiers import Tier

log = structlog.get_logger("gatekeeper.drift.window")

_LOWER = {Tier.LARGE: Tier.MEDIUM, Tier.MEDIUM: Tier.SMALL}
_TRACKED = frozenset({"measured", "pinned", "demoted"})  # unmeasured pairs have nothing to judge
_MAX_PAIRS = 4096  # keys come from clients' model names: bound what is kept
_HISTORY = 50  # events kept per pair
_EXAMPLES = 3  # failing calls quoted as evidence
_INBOX = 10_000  # answers queued for the worker at most
_BATCH_S = 0.25  # the worker judges what gathered in this long, at once


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


class DemotionBoard(Protocol):
    """Where replicas share demotions (drift_board.RedisDemotionBoard)."""

    def start(
        self,
        on_demoted: Callable[[dict[str, Any]], None],
        on_ended: Callable[[str, str], None],
        on_sync: Callable[[dict[str, dict[str, Any]]], None],
    ) -> None: ...

    def publish(self, record: dict[str, Any]) -> None: ...

    def retract(self, key: str, why: str) -> None: ...

    def close(self) -> None: ...


def _stamp(profile: Profile | None) -> str | None:
    """Which measurement a profile is: a newer one ends a demotion of the older."""
    return profile.tested_at if profile is not None else None


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Demotion:
    key: str
    from_tier: Tier
    to_tier: Tier
    at: float
    stamp: str | None  # the profile it demotes
    breaches: tuple[Breach, ...]
    examples: tuple[dict[str, Any], ...]
    window: dict[str, Any]

    @property
    def reason(self) -> str:
        return "; ".join(str(b) for b in self.breaches)

    def to_record(self) -> dict[str, Any]:
        """As shared with other replicas (drift_board.py)."""
        return {
            "key": self.key,
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
        breaches = tuple(
            Breach(Fault(b["fault"]), int(b["count"]), int(b["calls"]), float(b["lower"]), float(b["ceiling"]))
            for b in raw["breaches"]
        )
        return cls(
            str(raw["key"]),
            Tier(raw["fromTier"]),
            Tier(raw["toTier"]),
            float(raw["at"]),
            raw.get("stamp"),
            breaches,
            tuple(raw.get("examples") or ()),
            dict(raw.get("window") or {}),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "fromTier": self.from_tier.value,
            "toTier": self.to_tier.value,
            "at": _iso(self.at),
            "reason": self.reason,
            "breaches": [b.to_json() for b in self.breaches],
            "examples": list(self.examples),
            "window": self.window,
            "profileTestedAt": self.stamp,
        }


@dataclass
class _Pair:
    window: Window
    tier: Tier = Tier.SMALL
    source: str = "measured"
    stamp: str | None = None
    drifting: list[Breach] = field(default_factory=list)
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=_HISTORY))


class DriftMonitor:
    """Per-pair drift state, fed from the request path and judged by a worker thread."""

    def __init__(
        self,
        settings: DriftSettings | None = None,
        *,
        remeasure: Callable[[str], None] | None = None,
        changed: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.time,
        board: DemotionBoard | None = None,
    ) -> None:
        self.settings = settings or DriftSettings()
        self._remeasure = remeasure  # key -> start a measurement of that pair
        self._changed = changed  # a demotion began or ended: drop cached resolutions
        self._clock = clock
        self._z = z_for(self.settings.confidence)
        # Bounded: if the worker ever falls behind, the oldest answers are dropped, not the proxy.
        self._inbox: deque[tuple[float, str, Tier, str, str | None, Sequence[Call], Mapping[str, Schema | None]]] = (
            deque(maxlen=_INBOX)
        )
        self._ended: deque[tuple[str, Demotion, str]] = deque()
        self._pairs: OrderedDict[str, _Pair] = OrderedDict()
        self._demotions: dict[str, Demotion] = {}
        self._lock = threading.RLock()  # the pairs and demotions
        self._draining = threading.Lock()  # one drain at a time, so a drain sees all before it
        self._wake = threading.Event()
        self._stop = False
        self._stopped = threading.Event()
        self._worker: threading.Thread | None = None
        # Shared with other replicas (Redis) when there is a board; what to tell it is queued
        # under the lock and sent outside it.
        self._board = board
        self._outbox: deque[tuple[str, Any]] = deque()
        self._adopted: set[str] = set()  # keys whose demotion in force came from another replica
        if board is not None:
            board.start(self._adopt, self._remote_end, self._sync)

    # -- the request path: cheap ------------------------------------------------------------

    def submit(self, served: Served, calls: Sequence[Call], offered: Mapping[str, Schema | None]) -> None:
        """Queue the calls of one answer for judging. O(1); never raises, never blocks."""
        if not calls or not self.settings.enabled or served.source not in _TRACKED or self._stop:
            return
        profile = served.profile
        # Ceilings are those of the tier the pair earned (or was pinned to), not of a demotion.
        tier = profile.tier if profile is not None and served.source != "pinned" else served.tier
        self._inbox.append((self._clock(), served.key, tier, served.source, _stamp(profile), calls, offered))
        if not self._wake.is_set():
            if self._worker is None:
                self._start_worker()
            self._wake.set()

    def demotion(self, key: str, profile: Profile | None) -> Demotion | None:
        """The demotion in force for a pair served by `profile`, if any (one dict lookup)."""
        found = self._demotions.get(key)
        if found is None or not self.settings.enabled:
            return None
        if profile is None or _stamp(profile) != found.stamp:
            # A newer profile decides now (perhaps measured by another replica). The bookkeeping
            # (history, log line) is the worker's: this runs on the request path.
            if self._demotions.pop(key, None) is not None:
                why = f"a newer profile landed (tier {profile.tier.value})" if profile else "the profile is gone"
                self._ended.append((key, found, why))
                self._wake.set()
            return None
        return found

    # -- admin and core ---------------------------------------------------------------------

    def profile_landed(self, key: str, profile: Profile) -> None:
        """A measurement of the pair landed: it decides from now on, on a fresh window."""
        with self._lock:
            found = self._demotions.get(key)
            if found is not None:
                self._end(key, found, f"re-measured: tier {profile.tier.value}")
            pair = self._pairs.get(key)
            if pair is not None:
                pair.window.clear()
                pair.drifting = []
                pair.stamp = _stamp(profile)
        self._flush()

    def reconfigure(self, settings: DriftSettings) -> None:
        """New settings (a config reload): windows are resized, not emptied; demotions stand.
        Turning drift off stops recording and lifts every demotion from resolution at once."""
        with self._lock:
            self.settings = settings
            self._z = z_for(settings.confidence)
            now = self._clock()
            for pair in self._pairs.values():
                pair.window.resize(settings.window_calls, settings.window_s, now)
        if self._changed is not None:
            self._changed()

    def clear(self, key: str, by: str = "admin") -> bool:
        """End a pair's demotion and start its window afresh; False when it was not demoted."""
        self.drain()
        with self._lock:
            found = self._demotions.get(key)
            pair = self._pairs.get(key)
            if pair is not None:  # the evidence would demote it again at once
                pair.window.clear()
                pair.drifting = []
            if found is None:
                return False
            self._end(key, found, f"cleared by {by}")
        self._flush()
        return True

    def report(self) -> dict[str, dict[str, Any]]:
        """Live figures per pair, for the admin API and `gatekeeper profiles`."""
        self.drain()
        now = self._clock()
        with self._lock:
            keys = set(self._pairs) | set(self._demotions)
            return {key: self._describe(key, now) for key in sorted(keys)}

    def drain(self) -> None:
        """Judge everything queued so far (the worker calls this; so may tests and readers).

        Returns once every answer queued before the call is judged, also those the worker had
        already taken. Only readers wait here, never a request."""
        with self._draining:
            while self._ended:
                key, demotion, why = self._ended.popleft()
                with self._lock:
                    self._log_end(key, demotion, why)
            while True:
                try:
                    item = self._inbox.popleft()
                except IndexError:
                    break
                with self._lock:
                    try:
                        self._record(*item)
                    except Exception:
                        log.exception("drift_record_failed", key=item[1])
            self._flush()

    def close(self) -> None:
        self._stop = True
        self._stopped.set()
        worker, self._worker = self._worker, None
        if worker is not None:
            self._wake.set()
            worker.join(timeout=5)
        if self._board is not None:
            self._board.close()

    # -- the worker -------------------------------------------------------------------------

    def _start_worker(self) -> None:
        with self._lock:
            if self._worker is None and not self._stop:
                self._worker = threading.Thread(target=self._run, name="gatekeeper-drift", daemon=True)
                self._worker.start()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            # Let answers gather first: judging costs the GIL, and one hand-off per batch
            # disturbs the event loop far less than one per answer (measured: p50 +41% per
            # answer, within noise per batch). A demotion comes at most this much later.
            self._stopped.wait(_BATCH_S)
            self._wake.clear()
            if self._stop:
                return
            self.drain()

    def _record(
        self,
        at: float,
        key: str,
        tier: Tier,
        source: str,
        stamp: str | None,
        calls: Iterable[Call],
        offered: Mapping[str, Schema | None],
    ) -> None:
        pair = self._pair(key)
        if source != "pinned" and stamp != pair.stamp:
            pair.window.clear()  # a new measurement starts its own evidence
            pair.drifting = []
        pair.tier, pair.source, pair.stamp = tier, source, stamp
        for call in calls:
            seen = observe(call, offered, at)
            pair.window.add(seen)
            metrics.DRIFT_CALLS.labels(seen.fault.value if seen.fault else "ok").inc()
        self._judge(key, pair, at)

    def _pair(self, key: str) -> _Pair:
        pair = self._pairs.get(key)
        if pair is None:
            if len(self._pairs) >= _MAX_PAIRS:
                self._pairs.popitem(last=False)
            pair = self._pairs[key] = _Pair(Window(self.settings.window_calls, self.settings.window_s))
        self._pairs.move_to_end(key)
        return pair

    def _judge(self, key: str, pair: _Pair, now: float) -> None:
        figures = pair.window.figures(now)
        found = breaches(figures, self.settings.ceilings_for(pair.tier), self._z, self.settings.min_calls)
        was, pair.drifting = pair.drifting, found
        if not found:
            if was:
                self._event(pair, now, "recovered", "fault rates back under the ceilings")
                log.info("drift_recovered", key=key, tier=pair.tier.value, window=figures.to_json())
            return
        lower = _LOWER.get(pair.tier)
        if pair.source == "measured" and lower is not None and key not in self._demotions:
            self._demote(key, pair, lower, found, now)
        elif not was:
            why = {"pinned": "pinned: never demoted", "demoted": "already demoted"}.get(pair.source, "no lower tier")
            self._event(pair, now, "drifting", f"{'; '.join(map(str, found))} ({why})")
            log.warning(
                "drift_detected",
                key=key,
                tier=pair.tier.value,
                source=pair.source,
                demoted=False,
                why=why,
                window=figures.to_json(),
                breaches=[str(b) for b in found],
                examples=[o.example() for o in pair.window.examples(_EXAMPLES)],
            )

    def _demote(self, key: str, pair: _Pair, lower: Tier, found: list[Breach], now: float) -> None:
        figures = pair.window.figures(now)
        window = {**figures.to_json(), "maxCalls": self.settings.window_calls, "maxAgeS": self.settings.window_s}
        demotion = Demotion(
            key,
            pair.tier,
            lower,
            now,
            pair.stamp,
            tuple(found),
            tuple(o.example() for o in pair.window.examples(_EXAMPLES)),
            window,
        )
        self._demotions[key] = demotion
        self._adopted.discard(key)
        self._outbox.append(("demoted", demotion.to_record()))
        self._event(pair, now, "demoted", f"{pair.tier.value} -> {lower.value}: {demotion.reason}")
        metrics.DRIFT_DEMOTIONS.labels(from_tier=pair.tier.value, to_tier=lower.value).inc()
        log.warning(
            "drift_demoted",
            key=key,
            from_tier=pair.tier.value,
            to_tier=lower.value,
            window=window,
            breaches=[b.to_json() for b in found],
            examples=list(demotion.examples),
            remeasure=self.settings.remeasure and self._remeasure is not None,
        )
        if self._changed is not None:
            self._changed()
        if self.settings.remeasure and self._remeasure is not None:
            try:
                self._remeasure(key)
                self._event(pair, now, "remeasure", "measurement scheduled")
            except Exception as exc:  # noqa: BLE001 - the demotion stands; an admin can re-measure
                log.error("drift_remeasure_failed", key=key, error=repr(exc))
                self._event(pair, now, "remeasure", f"could not be scheduled: {exc}")

    def _end(self, key: str, demotion: Demotion, why: str, share: bool = True) -> None:
        """(Under the lock.) End a demotion in force here; tell the other replicas unless it came from them."""
        if self._demotions.get(key) is not demotion:
            return  # someone else ended it first
        del self._demotions[key]
        self._adopted.discard(key)
        self._log_end(key, demotion, why, share)

    def _log_end(self, key: str, demotion: Demotion, why: str, share: bool = True) -> None:
        if share:
            self._outbox.append(("ended", (key, why)))
        pair = self._pair(key)
        pair.window.clear()  # whatever ended it (new profile, admin, another replica): fresh evidence
        pair.drifting = []
        self._event(pair, self._clock(), "ended", why)
        log.info("drift_demotion_ended", key=key, from_tier=demotion.from_tier.value, why=why)
        if self._changed is not None:
            self._changed()

    # -- other replicas (when there is a board) ----------------------------------------------

    def _flush(self) -> None:
        """Tell the board what happened here; outside the lock (it does network I/O)."""
        while self._outbox:
            op, what = self._outbox.popleft()
            if self._board is None:
                continue
            if op == "demoted":
                self._board.publish(what)
            else:
                self._board.retract(*what)

    def _adopt(self, record: dict[str, Any]) -> None:
        demotion = Demotion.from_record(record)
        with self._lock:
            current = self._demotions.get(demotion.key)
            if current is not None and current.at == demotion.at:
                return
            self._demotions[demotion.key] = demotion
            self._adopted.add(demotion.key)
            self._event(
                self._pair(demotion.key),
                self._clock(),
                "demoted",
                f"{demotion.from_tier.value} -> {demotion.to_tier.value} on another replica: {demotion.reason}",
            )
        log.warning(
            "drift_demoted",
            key=demotion.key,
            from_tier=demotion.from_tier.value,
            to_tier=demotion.to_tier.value,
            origin="another replica",
            breaches=[str(b) for b in demotion.breaches],
        )
        if self._changed is not None:
            self._changed()

    def _remote_end(self, key: str, why: str) -> None:
        with self._lock:
            found = self._demotions.get(key)
            if found is not None:
                self._end(key, found, f"{why} (on another replica)", share=False)

    def _sync(self, records: dict[str, dict[str, Any]]) -> None:
        """After a (re)connect: adopt the board's demotions; drop those adopted earlier that are
        gone from it (ended elsewhere while this replica was away). This replica's own
        demotions end by its own rules: they may not have reached the board yet."""
        for key, record in records.items():
            try:
                self._adopt(record)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("drift_record_skipped", key=key, reason=repr(exc))
        with self._lock:
            for key in (self._adopted & set(self._demotions)) - set(records):
                self._end(key, self._demotions[key], "ended on another replica while this one was away", share=False)

    def _event(self, pair: _Pair, at: float, event: str, detail: str) -> None:
        pair.history.append({"at": _iso(at), "event": event, "detail": detail})

    def _describe(self, key: str, now: float) -> dict[str, Any]:
        pair = self._pairs.get(key) or _Pair(Window(self.settings.window_calls, self.settings.window_s))
        figures = pair.window.figures(now)
        demotion = self._demotions.get(key)
        return {
            "tier": pair.tier.value,
            "source": pair.source,
            "window": {**figures.to_json(), "maxCalls": self.settings.window_calls, "maxAgeS": self.settings.window_s},
            "rates": {
                fault.value: {
                    "count": count,
                    "rate": round(count / figures.calls, 4) if figures.calls else 0.0,
                    "lower": round(lower, 4),
                    "ceiling": ceiling,
                }
                for fault, (count, lower, ceiling) in rates(
                    figures, self.settings.ceilings_for(pair.tier), self._z
                ).items()
            },
            "drifting": bool(pair.drifting),
            "demoted": demotion.to_json() if demotion is not None else None,
            "history": list(pair.history),
        }


__all__ = ["Demotion", "DriftMonitor", "Fault", "Served"]
