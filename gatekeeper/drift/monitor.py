"""The drift monitor: per `model@effort` evidence, demotions, their ends, and their side effects.

The request path only appends to a queue (`submit`: a deque append and, when the worker sleeps,
waking it); a worker thread classifies the calls, judges them and demotes. Tier resolution asks
`demotion(key, client)`: two dict lookups.

Who can demote whom (the statistics are gatekeeper.drift.sequential's):

- each client identity (gatekeeper.drift.identity) has its own CUSUM per fault kind; when it
  passes the threshold the pair is demoted one tier **for that client only**;
- the calls of every identified client together have one more CUSUM, judged without the
  `min_clients - 1` clients that contributed most to it: when even that passes the threshold,
  the pair is demoted **for everyone** (and measured again). No `min_clients - 1` clients,
  however much they send, can do that alone; anonymous traffic never counts towards it;
- clients without an identity share one, ANONYMOUS: they can demote the pair for each other.

A demotion lasts until live traffic ends it or an admin clears it: the calls since it began
(of that client, or for everyone's: of all identified clients, without the `min_clients - 1`
busiest) must show every rate under its ceiling. A measurement that lands meanwhile changes
nothing about it: the served tier is the lower of the profile's and the demotion's. Evidence
towards a demotion is gathered only while none covers the client, and starts from nothing when
one ends. Pins are never demoted: a drifting pinned pair is logged and shown, nothing more.
`small` has no lower tier: same.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from gatekeeper.drift.demotion import (
    MAX_CLIENTS,
    Breach,
    Demotion,
    PairState,
    Scope,
    Served,
    iso,
    stamp_of,
    whom,
)
from gatekeeper.drift.identity import ANONYMOUS
from gatekeeper.drift.report import describe
from gatekeeper.drift.sequential import Cusum, Tally, cusums_for
from gatekeeper.drift.window import DriftSettings, Fault, Observation, Schema, Window, observe
from gatekeeper.observe import logs, metrics
from gatekeeper.protocols.base import Call
from gatekeeper.rules.tiers import Tier
from gatekeeper.store.base import DemotionBoard
from gatekeeper.store.profile import Profile

log = logs.get_logger(__name__)

_LOWER = {Tier.LARGE: Tier.MEDIUM, Tier.MEDIUM: Tier.SMALL}
_TRACKED = frozenset({"measured", "pinned", "demoted"})  # unmeasured pairs have nothing to judge
_MAX_PAIRS = 4096  # keys come from clients' model names: bound what is kept
_EXAMPLES = 3  # failing calls quoted as evidence
_INBOX = 10_000  # answers queued for the worker at most
_BATCH_S = 0.25  # the worker judges what gathered in this long, at once


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
        # Bounded: if the worker ever falls behind, the oldest answers are dropped, not the proxy.
        self._inbox: deque[
            tuple[float, str, Tier, str, str | None, str, Sequence[Call], Mapping[str, Schema | None]]
        ] = deque(maxlen=_INBOX)
        self._pairs: OrderedDict[str, PairState] = OrderedDict()
        self._demotions: dict[tuple[str, Scope], Demotion] = {}
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
        self._adopted: set[tuple[str, Scope]] = set()  # demotions in force that came from another replica
        # Demotions ended here (slot -> when each began): a resync that still finds one on the
        # board, its end not yet written there, must not bring it back.
        self._ended: OrderedDict[tuple[str, Scope], float] = OrderedDict()
        # Evidence judged here, for the other replicas; and theirs, to judge beside ours.
        self._shared: list[dict[str, Any]] = []
        self._remote: deque[tuple[float, str, Tier, str, str | None, str, list[Observation]]] = deque(maxlen=_INBOX)
        if board is not None:
            board.start(self._adopt, self._remote_end, self._sync, self._remote_evidence)

    # -- the request path: cheap ------------------------------------------------------------

    def submit(
        self,
        served: Served,
        calls: Sequence[Call],
        offered: Mapping[str, Schema | None],
        client: str | None = None,
        hidden: Collection[str] = (),
    ) -> None:
        """Queue the calls of one answer for judging, as evidence of `client` (None: anonymous).
        Calls to `hidden` tools (offered by the client, hidden by the tier) are no evidence: an
        agent's history asks for them, and counting them would make a demotion feed itself.
        O(1); never raises, never blocks."""
        if not calls or not self.settings.enabled or served.source not in _TRACKED or self._stop:
            return
        profile = served.profile
        # Ceilings are those of the tier the pair earned (or was pinned to), not of a demotion.
        tier = profile.tier if profile is not None and served.source != "pinned" else served.tier
        source = "pinned" if served.source == "pinned" else "measured"
        if hidden:
            calls = [c for c in calls if c.name not in hidden]
            if not calls:
                return
        item = (self._clock(), served.key, tier, source, stamp_of(profile), client or ANONYMOUS, calls, offered)
        self._inbox.append(item)
        if not self._wake.is_set():
            if self._worker is None:
                self._start_worker()
            self._wake.set()

    def demotion(self, key: str, client: str | None = None) -> Demotion | None:
        """The demotion in force for `client` on the pair: everyone's, else the client's own.
        `client` None asks for everyone's only (an in-process caller, the console)."""
        if not self.settings.enabled:
            return None
        found = self._demotions.get((key, None))
        if found is None and client is not None:
            found = self._demotions.get((key, client))
        return found

    # -- admin and core ---------------------------------------------------------------------

    def profile_landed(self, key: str, profile: Profile) -> None:
        """A measurement of the pair landed. Demotions stand (live evidence is not overruled by
        a benchmark that cannot see what live traffic sees); the served tier is the lower one."""
        with self._lock:
            standing = [d for (k, _), d in self._demotions.items() if k == key]
            pair = self._pairs.get(key)
            if pair is not None and standing:
                self._event(pair, self._clock(), "remeasured", f"tier {profile.tier.value}; the demotion stands")

    def reconfigure(self, settings: DriftSettings) -> None:
        """New settings (a config reload): evidence judged by changed tests starts afresh;
        demotions stand. Turning drift off stops recording and lifts every demotion from
        resolution at once."""
        with self._lock:
            self.settings = settings
            now = self._clock()
            for pair in self._pairs.values():
                pair.window.resize(settings.window_calls, settings.window_s, now)
                for scope, tally in pair.restoring.items():
                    fresh = self._new_tally(scope)
                    tally.size, tally.per_client = fresh.size, fresh.per_client
                tests = self._tests(pair.tier)
                if tests != pair.tests:
                    pair.tests = tests
                    pair.reset_evidence()
        if self._changed is not None:
            self._changed()

    def clear(self, key: str, by: str = "admin") -> bool:
        """End every demotion of a pair (everyone's and clients' own) and start its evidence
        afresh; False when none was in force."""
        self.drain()
        with self._lock:
            found = [d for (k, _), d in self._demotions.items() if k == key]
            pair = self._pairs.get(key)
            if pair is not None:  # the evidence would demote it again at once
                pair.window.clear()
                pair.reset_evidence()
            for demotion in found:
                self._end(demotion, f"cleared by {by}")
        self._flush()
        return bool(found)

    def report(self) -> dict[str, dict[str, Any]]:
        """Live figures per pair, for the admin API and `gatekeeper profiles`."""
        self.drain()
        now = self._clock()
        with self._lock:
            keys = set(self._pairs) | {k for k, _ in self._demotions}
            return {key: self._describe(key, now) for key in sorted(keys)}

    def _describe(self, key: str, now: float) -> dict[str, Any]:
        pair = self._pairs.get(key) or PairState(Window(self.settings.window_calls, self.settings.window_s))
        demoted = {d.client: d for (k, _), d in self._demotions.items() if k == key}
        return describe(pair, self.settings, demoted, now)

    def drain(self) -> None:
        """Judge everything queued so far (the worker calls this; so may tests and readers).

        Returns once every answer queued before the call is judged, also those the worker had
        already taken. Only readers wait here, never a request."""
        with self._draining:
            for inbox, judge in ((self._inbox, self._record), (self._remote, self._apply)):
                while True:
                    try:
                        item = inbox.popleft()
                    except IndexError:
                        break
                    with self._lock:
                        try:
                            judge(*item)
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
            try:
                self.drain()
            except Exception:  # the worker must outlive any surprise: the next batch is judged
                log.exception("drift_worker_error")

    def _tests(self, tier: Tier) -> dict[Fault, Cusum]:
        return cusums_for(self.settings.ceilings_for(tier), self.settings)

    def _record(
        self,
        at: float,
        key: str,
        tier: Tier,
        source: str,
        stamp: str | None,
        client: str,
        calls: Iterable[Call],
        offered: Mapping[str, Schema | None],
    ) -> None:
        seen = [observe(call, offered, at, self.settings.evidence_values) for call in calls]
        if self._board is not None:
            self._shared.append(
                {
                    "at": at,
                    "key": key,
                    "tier": tier.value,
                    "source": source,
                    "stamp": stamp,
                    "client": client,
                    "calls": [obs.to_json() for obs in seen],
                }
            )
        self._apply(at, key, tier, source, stamp, client, seen)

    def _apply(
        self, at: float, key: str, tier: Tier, source: str, stamp: str | None, client: str, seen: list[Observation]
    ) -> None:
        """One answer's judged calls into the pair's evidence, then its verdict (this replica's
        answers and, with a board, the other replicas')."""
        pair = self._pair(key)
        if tier != pair.tier or not pair.tests:  # new ceilings: their own evidence
            pair.tests = self._tests(tier)
            pair.reset_evidence()
        pair.tier, pair.source, pair.stamp = tier, source, stamp
        identified = client != ANONYMOUS
        everyone = (key, None) in self._demotions
        mine = (key, client) in self._demotions
        # Evidence towards a demotion only while none covers the client; the calls since a
        # demotion are what ends it.
        own = None if everyone or mine else pair.own_scores(client)
        tests = list(pair.tests.values())
        for obs in seen:
            pair.window.add(obs)
            metrics.DRIFT_CALLS.labels(obs.fault.value if obs.fault else "ok").inc()
            if own is not None:
                for test in tests:
                    own[test.fault] = test.step(own.get(test.fault, 0.0), obs.fault)
            if identified and not everyone:
                pair.pooled.add(tests, client, obs.fault, MAX_CLIENTS)
            if identified and everyone:
                self._tally(pair, None).add(client, obs.fault)
            if mine:
                self._tally(pair, client).add(client, obs.fault)
        self._judge(key, pair, client, at)

    def _tally(self, pair: PairState, scope: Scope) -> Tally:
        tally = pair.restoring.get(scope)
        if tally is None:  # e.g. a demotion adopted from another replica
            tally = pair.restoring[scope] = self._new_tally(scope)
        return tally

    def _new_tally(self, scope: Scope) -> Tally:
        # Everyone's end is judged without the `min_clients - 1` busiest clients: with as few
        # clients as that, a window of `window_calls` would never count enough calls. And at most
        # `window_calls` of each client's: one flooding calls cannot push the others' out.
        calls = self.settings.window_calls
        return Tally(calls * self.settings.min_clients, per_client=calls) if scope is None else Tally(calls)

    def _pair(self, key: str) -> PairState:
        pair = self._pairs.get(key)
        if pair is None:
            if len(self._pairs) >= _MAX_PAIRS:
                self._pairs.popitem(last=False)
            pair = self._pairs[key] = PairState(Window(self.settings.window_calls, self.settings.window_s))
        self._pairs.move_to_end(key)
        return pair

    def _judge(self, key: str, pair: PairState, client: str, now: float) -> None:
        drop = self.settings.min_clients - 1
        alpha = 1 - self.settings.confidence
        everyone = self._demotions.get((key, None))
        if everyone is not None:
            if self._tally(pair, None).clean(self._tests(everyone.from_tier).values(), alpha, drop):
                self._end(everyone, f"live traffic back under the ceilings ({self._since(pair, None)})")
            return  # it covers this client too
        found = [
            Breach(f, score, t.threshold, t.ceiling, pair.pooled.clients(f))
            for f, t in pair.tests.items()
            if (score := pair.pooled.standing(f, drop)) >= t.threshold
        ]
        self._verdict(key, pair, None, found, now)
        if (key, None) in self._demotions:
            return
        mine = self._demotions.get((key, client))
        if mine is not None:
            if self._tally(pair, client).clean(self._tests(mine.from_tier).values(), alpha):
                self._end(mine, f"its live traffic is back under the ceilings ({self._since(pair, client)})")
            return
        own = pair.own.get(client, {})
        found = [
            Breach(f, own[f], t.threshold, t.ceiling, 1)
            for f, t in pair.tests.items()
            if own.get(f, 0.0) >= t.threshold
        ]
        self._verdict(key, pair, client, found, now)

    def _since(self, pair: PairState, scope: Scope) -> str:
        tally = pair.restoring.get(scope)
        if tally is None:
            return "no calls"
        counted = tally.counted(self.settings.min_clients - 1 if scope is None else 0)
        faults = ", ".join(f"{tally.faults[f]} {f.value}" for f in pair.tests)
        return f"{counted} calls counted of {tally.calls}: {faults}"

    def _verdict(self, key: str, pair: PairState, scope: Scope, found: list[Breach], now: float) -> None:
        if not found:
            if scope in pair.alarmed:
                pair.alarmed.discard(scope)
                self._event(pair, now, "recovered", f"{whom(scope)}: evidence back under the thresholds")
            return
        lower = _LOWER.get(pair.tier)
        if pair.source == "measured" and lower is not None:
            self._demote(key, pair, scope, lower, found, now)
            return
        if scope in pair.alarmed:
            return
        pair.alarmed.add(scope)
        why = "pinned: never demoted" if pair.source == "pinned" else "no lower tier"
        self._event(pair, now, "drifting", f"{whom(scope)}: {'; '.join(map(str, found))} ({why})")
        examples = [o.example() for o in pair.window.examples(_EXAMPLES)]
        evidence = _evidence(key, scope, pair.window.figures(now).to_json(), found, examples)
        log.warning("drift_detected", **evidence, tier=pair.tier.value, source=pair.source, demoted=False, why=why)

    def _demote(self, key: str, pair: PairState, scope: Scope, lower: Tier, found: list[Breach], now: float) -> None:
        if scope is not None:
            # Each client's demotion keeps its calls since: bound how many one pair holds. So
            # many failing clients have long since demoted it for everyone anyway.
            own = [d for (k, c), d in self._demotions.items() if k == key and c is not None]
            if len(own) >= MAX_CLIENTS:
                self._end(min(own, key=lambda d: d.at), f"dropped: {MAX_CLIENTS} clients demoted, the oldest goes")
        figures = pair.window.figures(now)
        window = {**figures.to_json(), "maxCalls": self.settings.window_calls, "maxAgeS": self.settings.window_s}
        demotion = Demotion(
            key,
            scope,
            pair.tier,
            lower,
            now,
            pair.stamp,
            tuple(found),
            tuple(o.example() for o in pair.window.examples(_EXAMPLES)),
            window,
        )
        self._demotions[(key, scope)] = demotion
        self._adopted.discard((key, scope))
        pair.restoring[scope] = self._new_tally(scope)
        if scope is None:
            pair.reset_evidence()  # everyone is covered now: evidence restarts when it ends
        else:
            pair.own.pop(scope, None)
        self._outbox.append(("demoted", demotion.to_record()))
        remeasure = scope is None and self.settings.remeasure and self._remeasure is not None
        self._event(pair, now, "demoted", f"{whom(scope)}: {pair.tier.value} -> {lower.value}: {demotion.reason}")
        metrics.DRIFT_DEMOTIONS.labels(from_tier=pair.tier.value, to_tier=lower.value).inc()
        evidence = _evidence(key, scope, window, found, list(demotion.examples))
        log.warning("drift_demoted", **evidence, from_tier=pair.tier.value, to_tier=lower.value, remeasure=remeasure)
        if self._changed is not None:
            self._changed()
        if remeasure:  # only everyone's: one client's traffic must not cost a measurement
            try:
                self._remeasure(key)  # type: ignore[misc]
                self._event(pair, now, "remeasure", "measurement scheduled (it can lower the tier, not lift it)")
            except Exception as exc:  # noqa: BLE001 - the demotion stands; an admin can re-measure
                log.error("drift_remeasure_failed", key=key, error=repr(exc))
                self._event(pair, now, "remeasure", f"could not be scheduled: {exc}")

    def _end(self, demotion: Demotion, why: str, share: bool = True) -> None:
        """(Under the lock.) End a demotion in force here; tell the other replicas unless it came from them."""
        slot = (demotion.key, demotion.client)
        if self._demotions.get(slot) is not demotion:
            return  # someone else ended it first
        del self._demotions[slot]
        self._adopted.discard(slot)
        self._ended[slot] = demotion.at
        while len(self._ended) > _MAX_PAIRS:
            self._ended.popitem(last=False)
        if share:
            self._outbox.append(("ended", (demotion.slot, why)))
        pair = self._pair(demotion.key)
        pair.restoring.pop(demotion.client, None)
        if demotion.client is None:
            pair.reset_evidence()
        else:
            pair.own.pop(demotion.client, None)
        self._event(pair, self._clock(), "ended", f"{whom(demotion.client)}: {why}")
        log.info(
            "drift_demotion_ended",
            key=demotion.key,
            client=demotion.client or "everyone",
            from_tier=demotion.from_tier.value,
            why=why,
        )
        if self._changed is not None:
            self._changed()

    # -- other replicas (when there is a board) ----------------------------------------------

    def _flush(self) -> None:
        """Tell the board what happened here; outside the lock (it does network I/O)."""
        if self._shared:
            shared, self._shared = self._shared, []
            if self._board is not None:
                self._board.share(shared)
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
        slot = (demotion.key, demotion.client)
        with self._lock:
            current = self._demotions.get(slot)
            if (current is not None and current.at == demotion.at) or self._ended.get(slot) == demotion.at:
                return  # in force already, or ended here (its end may not have reached the board yet)
            self._demotions[slot] = demotion
            self._adopted.add(slot)
            pair = self._pair(demotion.key)
            pair.restoring[demotion.client] = self._new_tally(demotion.client)
            self._event(
                pair,
                self._clock(),
                "demoted",
                f"{whom(demotion.client)}: {demotion.from_tier.value} -> {demotion.to_tier.value} "
                f"on another replica: {demotion.reason}",
            )
        log.warning(
            "drift_demoted",
            key=demotion.key,
            client=demotion.client or "everyone",
            from_tier=demotion.from_tier.value,
            to_tier=demotion.to_tier.value,
            origin="another replica",
            breaches=[str(b) for b in demotion.breaches],
        )
        if self._changed is not None:
            self._changed()

    def _remote_evidence(self, items: list[dict[str, Any]]) -> None:
        """Another replica's judged calls: queued to be judged here as if relayed here."""
        if not self.settings.enabled or self._stop:
            return
        for item in items:
            try:
                seen = [Observation.from_json(obs) for obs in item["calls"]]
                tier, client, stamp = Tier(item["tier"]), item["client"], item.get("stamp")
                if not isinstance(item["key"], str) or not isinstance(client, str):
                    raise ValueError("'key' and 'client' are strings")
                source = "pinned" if item.get("source") == "pinned" else "measured"
                at = float(item["at"])
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("drift_evidence_skipped", reason=repr(exc)[:200])
                continue
            self._remote.append(
                (at, item["key"], tier, source, stamp if isinstance(stamp, str) else None, client, seen)
            )
        if self._worker is None:
            self._start_worker()
        self._wake.set()

    def _remote_end(self, slot: str, why: str) -> None:
        with self._lock:
            for found in [d for d in self._demotions.values() if d.slot == slot]:
                self._end(found, f"{why} (on another replica)", share=False)

    def _sync(self, records: dict[str, dict[str, Any]]) -> None:
        """After a (re)connect: adopt the board's demotions; drop those adopted earlier that are
        gone from it (ended elsewhere while this replica was away). This replica's own
        demotions end by its own rules: they may not have reached the board yet."""
        for slot, record in records.items():
            try:
                self._adopt(record)
            except (KeyError, TypeError, ValueError) as exc:
                log.warning("drift_record_skipped", slot=slot, reason=repr(exc))
        with self._lock:
            for adopted in [self._demotions[s] for s in self._adopted & set(self._demotions)]:
                if adopted.slot not in records:
                    self._end(adopted, "ended on another replica while this one was away", share=False)

    def _event(self, pair: PairState, at: float, event: str, detail: str) -> None:
        pair.history.append({"at": iso(at), "event": event, "detail": detail})


def _evidence(
    key: str, scope: Scope, window: dict[str, Any], found: list[Breach], examples: list[Any]
) -> dict[str, Any]:
    """What a drift log line shows of the evidence: the pair, whom it covers, the window, the breaches."""
    breaches = [b.to_json() for b in found]
    return {"key": key, "client": scope or "everyone", "window": window, "breaches": breaches, "examples": examples}


__all__ = ["ANONYMOUS", "Breach", "Demotion", "DriftMonitor", "Fault", "Served"]
