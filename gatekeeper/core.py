"""The Gatekeeper core: tier resolution, pins, unknown-model policies, single-flight measurement.

Every front end (proxy, CLI, ToolRegistry, adapters) is a thin layer over this class.
Measurements run on one background event loop owned by the core, so sync callers can start one
without blocking and every caller, sync or async, shares the same single flight per pair.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import structlog

from gatekeeper.backends import Backend
from gatekeeper.config import Settings, load_settings
from gatekeeper.drift_monitor import DriftMonitor
from gatekeeper.errors import NotMeasured
from gatekeeper.gating import Gated, ToolChoiceBlocked, ToolPolicy, gate_request, tool_name
from gatekeeper.profiles import DEFAULT_EFFORT, JsonFileStore, Profile, ProfileStore, profile_key, split_key
from gatekeeper.measure import MeasurementService
from gatekeeper.runner import Progress
from gatekeeper.suite import Suite, load_suite
from gatekeeper.tiers import Tier

log = structlog.get_logger("gatekeeper.core")

Source = Literal["measured", "pinned", "pending", "unmeasured", "demoted"]

# How long a found Resolution is reused per (model, effort) before pins and the store are asked
# again. The proxy asks on every request; `invalidate` and a landed measurement clear it at once.
RESOLUTION_TTL_S = 1.0
_RESOLUTION_CACHE_MAX = 4096  # model names come from clients: bound the cache
_PROGRESS_KEPT = 64  # finished measurements remembered for the console; also bounds client-named keys


@dataclass(frozen=True)
class Resolution:
    """The tier applied to one `model@effort`, and where it came from."""

    tier: Tier
    source: Source
    key: str
    profile: Profile | None = None


class Gatekeeper:
    """Decides a model's tier and filters its tools. Build it from a config file or from Settings."""

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: ProfileStore | None = None,
        suite: Suite | None = None,
        backend_factory: Callable[[str], Backend] | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.suite = suite or load_suite(self.settings.suite)
        self.store = store or JsonFileStore(self.settings.store)
        self.policy = ToolPolicy(self.settings.tools.required_tier, self.settings.tools.default_tier)
        self.measurements = MeasurementService(self.settings, self.suite, self.store, backend_factory)
        self._flights: dict[str, concurrent.futures.Future[Profile]] = {}
        self._failures: dict[str, tuple[int, float]] = {}  # key -> (failures in a row, retry not before)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._resolved: dict[tuple[str, str], tuple[float, Resolution]] = {}  # -> (expires, resolution)
        self._progress: dict[str, Progress] = {}  # key -> its latest measurement (the console shows it)
        # Live drift: fed the calls of relayed answers; may demote a measured pair one tier.
        self.drift = DriftMonitor(self.settings.drift, remeasure=self._remeasure_drifting,
                                  changed=self._resolved.clear)

    @classmethod
    def from_config(cls, path: str | Path) -> Gatekeeper:
        return cls(load_settings(path))

    # -- tier resolution -------------------------------------------------------------------

    def lookup(self, model: str, effort: str | None = None) -> Resolution | None:
        """Pin or valid measured profile for the pair, without side effects; None when neither."""
        effort = effort or DEFAULT_EFFORT
        now = time.monotonic()
        cached = self._resolved.get((model, effort))
        if cached is not None and cached[0] > now:
            return cached[1]
        found = self._lookup(model, effort)
        # Only answers are cached: a miss must see a measurement the moment it lands.
        if found is not None:
            if len(self._resolved) >= _RESOLUTION_CACHE_MAX:
                self._resolved.clear()
            self._resolved[(model, effort)] = (now + RESOLUTION_TTL_S, found)
        return found

    def _lookup(self, model: str, effort: str) -> Resolution | None:
        key = profile_key(model, effort)
        pins = self.settings.pins
        pin = pins.get(key) or pins.get(model)
        if pin is not None:
            return Resolution(pin, "pinned", key)
        profile = self.store.get(key)
        if profile is not None and profile.is_valid_for(self.suite):
            demotion = self.drift.demotion(key, profile)
            if demotion is not None:
                return Resolution(demotion.to_tier, "demoted", key, profile)
            return Resolution(profile.tier, "measured", key, profile)
        return None

    def resolve(self, model: str, effort: str | None = None) -> Resolution:
        """Sync tier resolution. Under `wait` this blocks up to `wait_timeout_s`."""
        found, flight = self._find_or_start(model, effort)
        if found is None and flight is not None and self.settings.unknown_models == "wait":
            with contextlib.suppress(Exception):  # timeout or failed measurement: fail closed below
                flight.result(timeout=self.settings.wait_timeout_s)
            found = self.lookup(model, effort)
        return found or self._unknown(profile_key(model, effort), flight)

    async def aresolve(self, model: str, effort: str | None = None) -> Resolution:
        """Async tier resolution; never blocks the calling event loop."""
        found, flight = self._find_or_start(model, effort)
        if found is None and flight is not None and self.settings.unknown_models == "wait":
            with contextlib.suppress(Exception):  # timeout or failed measurement: fail closed below
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(flight)), self.settings.wait_timeout_s)
            found = self.lookup(model, effort)
        return found or self._unknown(profile_key(model, effort), flight)

    def _find_or_start(self, model: str, effort: str | None) -> tuple[Resolution | None, concurrent.futures.Future | None]:
        found = self.lookup(model, effort)
        if found is not None:
            return found, None
        return None, self._start(model, effort or DEFAULT_EFFORT)

    def _unknown(self, key: str, flight: concurrent.futures.Future | None) -> Resolution:
        source: Source = "pending" if flight is not None and not flight.done() else "unmeasured"
        if self.settings.unknown_models == "reject":
            raise NotMeasured(f"model {key!r} has not been measured yet ({source}); retry later")
        log.debug("fail_closed", key=key, tier=self.settings.unknown_tier.value, source=source)
        return Resolution(self.settings.unknown_tier, source, key)

    def tier_for(self, model: str, effort: str | None = None) -> tuple[Tier, Source]:
        resolution = self.resolve(model, effort)
        return resolution.tier, resolution.source

    async def atier_for(self, model: str, effort: str | None = None) -> tuple[Tier, Source]:
        resolution = await self.aresolve(model, effort)
        return resolution.tier, resolution.source

    def filter_tools(self, model: str, effort: str | None, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools (OpenAI schemas) this model may see at its tier."""
        return self.allowed(self.resolve(model, effort).tier, tools)

    async def afilter_tools(self, model: str, effort: str | None, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.allowed((await self.aresolve(model, effort)).tier, tools)

    def allowed(self, tier: Tier, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [t for i, t in enumerate(tools) if self.policy.allows(tier, tool_name(t, f"tools[{i}]"))]

    def gate(self, body: dict[str, Any], model: str, effort: str | None = None) -> tuple[Resolution, Gated]:
        """Resolve the pair and gate a Chat Completions request body in place (see `gate_request`).

        Raises NotMeasured (policy `reject`), RequestInvalid and ToolChoiceBlocked.
        """
        return self._gate(body, self.resolve(model, effort))

    async def agate(self, body: dict[str, Any], model: str, effort: str | None = None) -> tuple[Resolution, Gated]:
        """`gate` for async code."""
        return self._gate(body, await self.aresolve(model, effort))

    def _gate(self, body: dict[str, Any], resolution: Resolution) -> tuple[Resolution, Gated]:
        try:
            return resolution, gate_request(body, resolution.tier, self.policy)
        except ToolChoiceBlocked as exc:
            raise ToolChoiceBlocked(exc.tool, exc.required, exc.tier, resolution.source) from None

    # -- measurement -----------------------------------------------------------------------

    def measure(self, model: str, effort: str | None = None) -> concurrent.futures.Future[Profile]:
        """Start (or join) the measurement of a pair, ignoring any failure backoff."""
        flight = self._start(model, effort or DEFAULT_EFFORT, force=True)
        assert flight is not None
        return flight

    def progress(self) -> list[Progress]:
        """The running measurements, and the latest finished one of each recently measured pair."""
        with self._lock:
            return list(self._progress.values())

    def invalidate(self, model: str, effort: str | None = None) -> bool:
        key = profile_key(model, effort)
        with self._lock:
            self._failures.pop(key, None)
        removed = self.store.delete(key)
        self._resolved.clear()
        log.info("profile_invalidated", key=key, existed=removed)
        return removed

    def _start(self, model: str, effort: str, force: bool = False) -> concurrent.futures.Future[Profile] | None:
        key = profile_key(model, effort)
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight
            failures, not_before = self._failures.get(key, (0, 0.0))
            if not force and time.monotonic() < not_before:
                return None
            progress = Progress(key)
            flight = asyncio.run_coroutine_threadsafe(self._measure(model, effort, progress), self._background_loop())
            self._flights[key] = flight
            self._progress.pop(key, None)  # re-inserted last: the dict stays in start order
            self._progress[key] = progress
            while len(self._progress) > _PROGRESS_KEPT:
                del self._progress[next(iter(self._progress))]
        flight.add_done_callback(lambda f: self._landed(key, f))
        return flight

    def _landed(self, key: str, flight: concurrent.futures.Future) -> None:
        with self._lock:
            self._flights.pop(key, None)
            error = "cancelled" if flight.cancelled() else flight.exception()
            progress = self._progress.get(key)
            if progress is not None:
                progress.finished = time.time()
                progress.error = None if error is None else str(error) or type(error).__name__
                if error is None:
                    progress.tier = flight.result().tier.value
            if error is None:
                self._failures.pop(key, None)
                return
            failures = self._failures.get(key, (0, 0.0))[0] + 1
            bench = self.settings.bench
            delay = min(bench.retry_after_s * 2 ** (failures - 1), bench.retry_max_s)
            self._failures[key] = (failures, time.monotonic() + delay)
        log.error("measurement_failed", key=key, error=str(error), failures=failures, retry_in_s=delay)

    async def _measure(self, model: str, effort: str, progress: Progress | None = None) -> Profile:
        profile = await self.measurements.measure(model, effort, progress=progress)
        self.drift.profile_landed(profile.key, profile)  # the new profile decides, not a demotion
        self._resolved.clear()  # a re-measured pair must not keep its old tier
        return profile

    def _remeasure_drifting(self, key: str) -> None:
        model, effort = split_key(key)
        self.measure(model, effort)

    def _background_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="gatekeeper-measure", daemon=True).start()
            self._loop = loop
        return self._loop

    def close(self) -> None:
        """Cancel running measurements, let them unwind, then stop the background loop."""
        self.drift.close()
        with self._lock:
            loop, self._loop = self._loop, None
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
