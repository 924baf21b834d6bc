"""Scheduling measurements: one per pair (single flight), leases, a cap, failure backoff, limits.

A measurement is a "flight" on one background event loop owned by the scheduler, so sync callers
start one without blocking and every caller, sync or async, joins the same flight per pair. A
flight coordinates with other processes through the store's Coordinator:

    fetch the pair (someone may have measured it) -> in backoff after failures? stop
    -> take the pair's lease -> fetch again (it may have landed meanwhile) -> take a slot of the
    concurrency cap (queued while none is free) -> measure, renewing both leases -> save, fenced
    by the lease's token -> release.

A flight that finds the lease taken follows: it wakes when the store reports the pair landed
(pub/sub with Redis) or at the next poll, and takes the lease over if its holder died. With a
JSON store the coordinator is a folder of lease files, so processes of one host share it too.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fnmatch
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from gatekeeper.config import Settings
from gatekeeper.errors import GatekeeperError, MeasurementFailed, WriteFenced
from gatekeeper.measuring.runner import Progress
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip
from gatekeeper.store import Coordinator, Lease, ProfileStore
from gatekeeper.store.profile import EFFORTS, Profile, profile_key
from gatekeeper.suite.loader import Suite

log = logs.get_logger(__name__)
T = TypeVar("T")

# measure(model, effort, lease, progress) -> the profile, saved fenced by `lease` (WriteFenced if
# refused), counting answered calls in `progress`.
MeasureFn = Callable[[str, str, Lease, Progress], Awaitable[Profile]]

_MAX_MODEL_NAME = 256
_REFUSAL_MEMORY_S = 5.0  # a refused or unreachable pair is not re-examined on every request
_UNAVAILABLE_RETRY_S = 1.0  # coordination (Redis) down: try again this soon
_PROGRESS_KEPT = 64  # finished measurements remembered for the console; also bounds client-named keys


@dataclass(frozen=True)
class Limits:
    """What the scheduler needs from the settings (swapped whole on reload)."""

    suite: Suite
    max_concurrent: int
    allow: tuple[str, ...] | None
    max_models: int
    max_pairs: int
    efforts: frozenset[str]  # every effort a pair may have (the protocols' and the config's)
    lease_ttl_s: float
    retry_after_s: float
    retry_max_s: float

    @classmethod
    def of(cls, settings: Settings, suite: Suite) -> Limits:
        lazy, bench = settings.lazy, settings.bench
        return cls(
            suite,
            lazy.max_concurrent,
            tuple(lazy.allow) if lazy.allow is not None else None,
            lazy.max_models,
            lazy.max_pairs,
            EFFORTS | set(settings.extra_efforts),
            lazy.lease_ttl_s,
            bench.retry_after_s,
            bench.retry_max_s,
        )


class MeasurementScheduler:
    def __init__(self, store: ProfileStore, measure: MeasureFn, limits: Limits) -> None:
        self.store = store
        self.limits = limits
        self._measure = measure
        self._coordinator: Coordinator = store.coordinator()
        self._flights: dict[str, concurrent.futures.Future[Profile]] = {}
        self._not_before: dict[str, float] = {}  # key -> monotonic time before which no flight starts
        self._wakers: dict[str, asyncio.Event] = {}
        self.queued: set[str] = set()  # pairs leased here and waiting for a slot of the cap
        self._progress: dict[str, Progress] = {}  # key -> its latest flight here (the console shows it)
        # Pairs a client's request started measuring here, landed or not: a failed measurement
        # cost its calls too, so it keeps counting against the lazy caps (bounded by max_pairs).
        self._attempted: set[str] = set()
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        # Store and lease calls get threads of their own: measurement code that fills the loop's
        # default executor must never starve the lease heartbeat.
        self._io = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="gatekeeper-lease")
        self._closed = False
        store.on_change(self._landed_elsewhere)

    # -- starting ----------------------------------------------------------------------------

    def start(
        self, model: str, effort: str, *, force: bool = False, fresh: bool = False
    ) -> concurrent.futures.Future[Profile] | None:
        """Join or start the pair's flight. None when no measurement may start now: in backoff,
        not allowed for lazy measurement, or past the cap on new names (all logged).

        `force` (an admin's "measure now") ignores the backoff and the lazy limits. `fresh`
        (drift's re-measurement) measures although a valid profile is stored, within them.
        """
        key = profile_key(model, effort)
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight
            if self._closed:
                return None
            if not force:
                if time.monotonic() < self._not_before.get(key, 0.0):
                    return None
                refusal = self._refusal(model, effort)
                if refusal is not None:
                    self._not_before[key] = time.monotonic() + _REFUSAL_MEMORY_S
                    if len(self._not_before) > 4096:
                        self._forget_expired()
                    log.warning("measurement_refused", key=clip(key), reason=refusal)
                    return None
            if not force:
                self._attempted.add(key)
            progress = Progress(key)
            flight = asyncio.run_coroutine_threadsafe(
                self._fly(model, effort, key, force or fresh, progress), self._background_loop()
            )
            self._flights[key] = flight
            self._progress.pop(key, None)  # re-inserted last: the dict stays in start order
            self._progress[key] = progress
            while len(self._progress) > _PROGRESS_KEPT:
                del self._progress[next(iter(self._progress))]
        flight.add_done_callback(lambda f: self._finished(key, f))
        return flight

    def _refusal(self, model: str, effort: str) -> str | None:
        """Why a client may not cause this pair's measurement, or None (issue: measurement abuse)."""
        limits = self.limits
        if len(model) > _MAX_MODEL_NAME or not model.isprintable():
            return f"model name is not printable or longer than {_MAX_MODEL_NAME} characters"
        if effort not in limits.efforts:  # the resolver refuses these first; a second lock here
            return f"effort is not one of {sorted(limits.efforts)}"
        if limits.allow is not None and not any(fnmatch.fnmatchcase(model, p) for p in limits.allow):
            return "model name matches no pattern of lazy.allow"
        data = self.store.load()
        pairs = set(data.profiles) | set(data.invalid)
        if profile_key(model, effort) in pairs | self._attempted:
            return None  # re-measuring a stored pair (a stale profile), or one tried before, adds nothing
        # Every new pair costs a suite run and a permanent entry, a new effort of a known model too;
        # one whose measurement failed still counts (else failing names could be named without end).
        if len(pairs | set(self._flights) | self._attempted) >= limits.max_pairs:
            return f"the store already holds lazy.max_pairs={limits.max_pairs} pairs"
        known = data.models() | {k.rpartition("@")[0] for k in self._attempted}
        if model not in known:
            measuring = {k.rpartition("@")[0] for k in self._flights}
            if len(known | measuring) >= limits.max_models:
                return f"the store already holds lazy.max_models={limits.max_models} models"
        return None

    def _forget_expired(self) -> None:
        now = time.monotonic()
        for key in [k for k, t in self._not_before.items() if t <= now]:
            del self._not_before[key]

    def progress(self) -> list[Progress]:
        """The flights running here, and the latest finished one of each recently measured pair."""
        with self._lock:
            return list(self._progress.values())

    def _finished(self, key: str, flight: concurrent.futures.Future[Profile]) -> None:
        with self._lock:
            self._flights.pop(key, None)
            error = None if flight.cancelled() else flight.exception()
            progress = self._progress.get(key)
            if progress is not None:
                progress.finished = time.time()
                if flight.cancelled():
                    progress.error = "cancelled"
                elif error is not None:
                    progress.error = str(error) or type(error).__name__
                else:
                    progress.tier = flight.result().tier.value
            if flight.cancelled() or error is None:
                self._not_before.pop(key, None)
                return
            now = time.monotonic()
            if isinstance(error, MeasurementFailed):
                self._not_before[key] = now + error.retry_in_s
            elif self._not_before.get(key, 0.0) <= now:  # not recorded by the flight itself
                self._not_before[key] = now + self.limits.retry_after_s
            retry = self._not_before[key] - now
        log.warning("measurement_not_landed", key=key, error=str(error), retry_in_s=round(retry, 2))

    # -- one flight ----------------------------------------------------------------------------

    async def _fly(self, model: str, effort: str, key: str, force: bool, progress: Progress) -> Profile:
        limits = self.limits  # the settings this flight started under
        coordinator = self._coordinator
        wake = self._wakers.setdefault(key, asyncio.Event())
        poll_s = min(0.5, limits.lease_ttl_s / 3)
        try:
            while True:
                if not force:
                    profile = await self._call(self.store.fetch, key)
                    if profile is not None and profile.is_valid_for(limits.suite):
                        return profile
                    remaining = await self._call(coordinator.backoff_s, key)
                    if remaining > 0:
                        raise MeasurementFailed(f"{key}: backing off after failed measurements", remaining)
                lease = await self._call(coordinator.acquire, key, limits.lease_ttl_s)
                if lease is not None:
                    try:
                        if not force:  # it may have landed between the fetch and the lease
                            profile = await self._call(self.store.fetch, key)
                            if profile is not None and profile.is_valid_for(limits.suite):
                                return profile
                        return await self._measure_leased(model, effort, key, lease, limits, progress)
                    finally:
                        with contextlib.suppress(Exception):
                            await self._io_call(coordinator.release, lease)
                # Another process measures the pair: follow it.
                force = False
                wake.clear()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), poll_s)
        finally:
            # One flight per pair per process: the next one (started only after this one is done)
            # makes its own event.
            self._wakers.pop(key, None)

    async def _measure_leased(
        self, model: str, effort: str, key: str, lease: Lease, limits: Limits, progress: Progress
    ) -> Profile:
        coordinator = self._coordinator
        held = [lease]
        heartbeat = asyncio.ensure_future(self._heartbeat(held, limits.lease_ttl_s))
        try:
            self.queued.add(key)
            try:
                slot = await self._slot(limits)
            finally:
                self.queued.discard(key)
            held.append(slot)
            log.info("measurement_leased", key=key, token=lease.token, slot=slot.name)
            try:
                profile = await self._measure(model, effort, lease, progress)
            except WriteFenced as exc:
                raise MeasurementFailed(str(exc), 0.0) from exc  # not the model's failure: no backoff
            except (asyncio.CancelledError, KeyboardInterrupt):
                raise
            except Exception as exc:
                try:
                    failures, delay = await self._io_call(
                        coordinator.record_failure, key, limits.retry_after_s, limits.retry_max_s
                    )
                except Exception:  # noqa: BLE001 - Redis down too: back off locally
                    failures, delay = 0, limits.retry_after_s
                log.error("measurement_failed", key=key, error=str(exc), failures=failures, retry_in_s=delay)
                with self._lock:  # the caller gets the measurement's own error; the backoff is kept here
                    self._not_before[key] = time.monotonic() + delay
                raise
            with contextlib.suppress(Exception):
                await self._io_call(coordinator.clear_failures, key)
            return profile
        finally:
            heartbeat.cancel()
            for extra in held[1:]:
                with contextlib.suppress(Exception):
                    await self._io_call(coordinator.release, extra)

    async def _slot(self, limits: Limits) -> Lease:
        """A slot of the cap on concurrent measurements; waits (queued) while every slot is taken."""
        waited = False
        while True:
            for i in range(limits.max_concurrent):
                slot = await self._call(self._coordinator.acquire, f"slot:{i}", limits.lease_ttl_s)
                if slot is not None:
                    return slot
            if not waited:
                log.info("measurement_queued", reason=f"lazy.max_concurrent={limits.max_concurrent} running")
                waited = True
            await asyncio.sleep(min(0.25, limits.lease_ttl_s / 4))

    async def _heartbeat(self, held: list[Lease], ttl_s: float) -> None:
        while True:
            await asyncio.sleep(ttl_s / 3)
            for lease in list(held):
                try:
                    if not await self._io_call(self._coordinator.renew, lease, ttl_s):
                        log.error(
                            "lease_lost",
                            name=lease.name,
                            token=lease.token,
                            consequence="a newer holder's result wins; ours is fenced out",
                        )
                except Exception as exc:  # noqa: BLE001 - Redis down: keep measuring, fencing decides
                    log.warning("lease_renew_failed", name=lease.name, error=str(exc))

    async def _io_call(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    async def _call(self, fn: Callable[..., T], *args: object) -> T:
        """Run a store or coordinator call off the loop; an outage means "not now", not a crash."""
        try:
            return await self._io_call(fn, *args)
        except GatekeeperError:
            raise
        except Exception as exc:
            raise MeasurementFailed(f"coordination unavailable: {exc}", _UNAVAILABLE_RETRY_S) from exc

    def _landed_elsewhere(self, key: str) -> None:
        """Store listener (any thread): a pair landed or was removed; wake its followers."""
        loop, wake = self._loop, self._wakers.get(key)
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # loop closed
                loop.call_soon_threadsafe(wake.set)
        with self._lock:
            self._not_before.pop(key, None)  # an invalidation lifts a backoff remembered here

    # -- lifecycle -----------------------------------------------------------------------------

    def forget_failures(self, key: str) -> None:
        with self._lock:
            self._not_before.pop(key, None)
        with contextlib.suppress(Exception):
            self._coordinator.clear_failures(key)

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="gatekeeper-measure", daemon=True).start()
            self._loop = loop
        return self._loop

    def close(self) -> None:
        """Cancel running measurements (their leases are released), then stop the loop."""
        with self._lock:
            loop, self._loop = self._loop, None
            self._closed = True
        if loop is None:
            return

        async def unwind() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(unwind(), loop).result(timeout=10)
        except Exception as exc:  # noqa: BLE001 - closing must not raise; say why it was not clean
            log.warning("close_unclean", error=repr(exc))
        loop.call_soon_threadsafe(loop.stop)
        self._io.shutdown(wait=False, cancel_futures=True)
