"""The Gatekeeper facade: what the proxy, the CLI, ToolRegistry and the adapters talk to.

It holds one immutable snapshot of the settings (settings, suite, tool policy, tier resolver)
and swaps it whole on `reload()`; each call reads the snapshot once, so a request that started
under the old settings finishes under them. The jobs live in one-concept parts:

    gatekeeper.core.resolver   which tier applies to a pair (pins, valid profiles)
    gatekeeper.core.router     which pair serves a request's tools (routing:, tools.requires)
    gatekeeper.measuring.scheduler  when a pair is measured (single flight, leases, cap, backoff, limits)
    gatekeeper.measuring.service    how a pair is measured (backends, run settings, saving, recommending)
    gatekeeper.store      where profiles live (JSON file or Redis; store/schemes.py: what each kind brings)
    gatekeeper.rules      what a tier lets through (pure)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from gatekeeper.config import Settings, load_settings
from gatekeeper.core.gate import check_before_measuring, gate_resolved
from gatekeeper.core.resolver import Resolution, Source, TierResolver
from gatekeeper.core.route_choice import RANKED_EFFORTS, Need
from gatekeeper.core.router import Route, Router
from gatekeeper.drift.monitor import DriftMonitor
from gatekeeper.errors import ConfigError, MeasurementFailed, NotMeasured, SuiteError
from gatekeeper.measuring.backends import Backend
from gatekeeper.measuring.runner import Progress
from gatekeeper.measuring.scheduler import Limits, MeasurementScheduler
from gatekeeper.measuring.service import MeasurementService
from gatekeeper.observe import logs
from gatekeeper.protocols import table as protocols
from gatekeeper.protocols.base import Codec
from gatekeeper.protocols.gate import Gated
from gatekeeper.rules.clients import Clients
from gatekeeper.rules.requirements import Capability, Requirements
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId, ToolPolicy
from gatekeeper.store import Lease, ProfileStore, demotion_board, open_store
from gatekeeper.store.profile import DEFAULT_EFFORT, Profile, profile_key, split_key
from gatekeeper.suite.loader import Suite, load_suite

log = logs.get_logger(__name__)

__all__ = ["Gatekeeper", "NotMeasured", "ProfileEntry", "Resolution", "Route", "Snapshot", "Source"]


@dataclass(frozen=True)
class Snapshot:
    """Everything derived from one version of the settings. A request takes one (`snapshot()`)
    and makes every decision with it: a reload while its body uploads changes nothing for it."""

    settings: Settings
    suite: Suite
    policy: ToolPolicy
    resolver: TierResolver
    measurements: MeasurementService
    router: Router
    clients: Clients = field(default_factory=Clients)  # per-client policy (`clients:`)


@dataclass(frozen=True)
class ProfileEntry:
    """One stored entry as the admin API shows it."""

    key: str
    profile: Profile | None  # None: the entry is not a readable profile (kept in the store as found)
    raw: Any
    valid: bool  # measured by the running suite (benchmarkVersion and testsHash match)
    source: str  # "measured" | "pinned" (a pin overrides it) | "stale" | "invalid"

    def to_json(self) -> dict[str, Any]:
        doc = dict(self.profile.to_json()) if self.profile is not None else {"raw": self.raw}
        return doc | {"valid": self.valid, "source": self.source}


class Gatekeeper:
    """Decides a model's tier and filters its tools. Build it from a config file or from Settings.

    Use it as a context manager, or call `close()`: whoever creates a Gatekeeper closes it.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: ProfileStore | None = None,
        suite: Suite | None = None,
        backend_factory: Callable[[str], Backend] | None = None,
        config_path: str | Path | None = None,
    ) -> None:
        """`backend_factory(model) -> Backend` replaces the configured backends (tests inject a
        fake one, as httpx tests inject a MockTransport); `store` and `suite` replace the
        configured ones; `config_path` is what `reload()` re-reads."""
        settings = settings or Settings()
        self._tier_listeners: list[Callable[[], None]] = []  # on_tier_change
        self._config_path = Path(config_path) if config_path else None
        self._fixed_suite = suite
        self._owns_store = store is None
        self.store: ProfileStore = store or open_store(settings.store)
        self._backend_factory = backend_factory
        # Live drift: fed the calls of relayed answers; may demote a measured pair one tier. Its
        # settings are the ones at start-up (a reload keeps the running monitor).
        self.drift = DriftMonitor(
            settings.drift,
            remeasure=self._remeasure_drifting,
            changed=self._forget,
            board=demotion_board(settings.store),  # the store's scheme says whether replicas share one
        )
        self._snapshot = self._build(settings)
        self._scheduler = MeasurementScheduler(self.store, self._measure, Limits.of(settings, self._snapshot.suite))
        self.store.on_change(self._changed)
        self._closed = False
        self._reload_lock = threading.Lock()

    @classmethod
    def from_config(cls, path: str | Path, **kwargs: Any) -> Gatekeeper:
        return cls(load_settings(path), config_path=path, **kwargs)

    def _build(self, settings: Settings) -> Snapshot:
        suite = self._fixed_suite or load_suite(settings.suite)
        policy = ToolPolicy(
            settings.tools.required_tier,
            settings.tools.default_tier,
            settings.upstream.unknown_fields,
            settings.mcp_bindings(),
            settings.tools.requires,  # its `server.tool` rules name servers too
            settings.tools.arguments,
        )
        resolver = TierResolver(settings, suite, self.store, self.drift.demotion)
        return Snapshot(
            settings,
            suite,
            policy,
            resolver,
            MeasurementService(settings, suite, self.store, self._backend_factory),
            Router(settings, policy, resolver, lambda model, effort: self._scheduler.start(model, effort)),
            Clients(settings.clients),
        )

    # -- the current settings ----------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        """The settings in force now, with everything derived from them, as one immutable value."""
        return self._snapshot

    @property
    def settings(self) -> Settings:
        return self._snapshot.settings

    @property
    def suite(self) -> Suite:
        return self._snapshot.suite

    @property
    def policy(self) -> ToolPolicy:
        return self._snapshot.policy

    @property
    def measurements(self) -> MeasurementService:
        """How pairs are measured under the current settings (backends, run settings, saving)."""
        return self._snapshot.measurements

    def reload(self, path: str | Path | None = None) -> Settings:
        """Re-read the config file and replace the settings atomically; returns the new settings.

        A config that fails validation raises ConfigError (naming the key's path) and the old
        settings stay in force. The store cannot change without a restart. Requests that started
        before the swap finish under the settings they started with.
        """
        with self._reload_lock:
            path = Path(path) if path else self._config_path
            if path is None:
                raise ConfigError("reload: this Gatekeeper was not built from a config file; give a path")
            settings = load_settings(path)
            old = self._snapshot
            if str(settings.store) != str(old.settings.store):
                where = f"from {old.settings.store} to {settings.store}"
                raise ConfigError.in_file(
                    path, f"store: cannot change {where} without a restart", "store: cannot change without a restart"
                )
            try:
                snapshot = self._build(settings)
            except SuiteError as exc:
                raise ConfigError.in_file(path, f"suite: {exc}", "suite: cannot be loaded") from None
            self._snapshot = snapshot
            self._scheduler.limits = Limits.of(settings, snapshot.suite)
            self.drift.reconfigure(settings.drift)  # windows resized, demotions kept
            self._config_path = path
        self._forget()  # pins and tool rules may have changed: listeners look again
        log.info(
            "config_reloaded",
            path=str(path),
            pins=len(settings.pins),
            tool_rules=len(settings.tools.required_tier),
            suite_hash=snapshot.suite.hash,
        )
        return settings

    # -- tier resolution ---------------------------------------------------------------------

    def lookup(self, model: str, effort: str | None = None, client: str | None = None) -> Resolution | None:
        """Pin or valid measured profile for the pair, without side effects; None when neither.
        `client`: the caller's drift identity (gatekeeper.drift.identity; None: no particular one)."""
        return self._snapshot.resolver.lookup(model, effort, client)

    def resolve(
        self, model: str, effort: str | None = None, client: str | None = None, *, snapshot: Snapshot | None = None
    ) -> Resolution:
        """Sync tier resolution under `snapshot` (default: the settings in force now) for the
        drift identity `client` (gatekeeper.drift.identity). Under `wait` this blocks up to
        `wait_timeout_s`."""
        return self._resolve(snapshot or self._snapshot, model, effort, client)

    async def aresolve(
        self, model: str, effort: str | None = None, client: str | None = None, *, snapshot: Snapshot | None = None
    ) -> Resolution:
        """Async tier resolution under `snapshot` (default: now); never blocks the calling event loop."""
        return await self._aresolve(snapshot or self._snapshot, model, effort, client)

    def _resolve(self, snap: Snapshot, model: str, effort: str | None, client: str | None = None) -> Resolution:
        found, flight = self._find_or_start(snap, model, effort, client)
        if found is None and flight is not None and snap.settings.unknown_models == "wait":
            with contextlib.suppress(Exception):  # timeout or failed measurement: fail closed below
                flight.result(timeout=snap.settings.wait_timeout_s)
            found = snap.resolver.lookup(model, effort, client)
        return found or self._unknown(snap, profile_key(model, effort), flight)

    async def _aresolve(self, snap: Snapshot, model: str, effort: str | None, client: str | None = None) -> Resolution:
        found, flight = self._find_or_start(snap, model, effort, client)
        if found is None and flight is not None and snap.settings.unknown_models == "wait":
            with contextlib.suppress(Exception):  # timeout or failed measurement: fail closed below
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(flight)), snap.settings.wait_timeout_s)
            found = snap.resolver.lookup(model, effort, client)
        return found or self._unknown(snap, profile_key(model, effort), flight)

    def _find_or_start(
        self, snap: Snapshot, model: str, effort: str | None, client: str | None = None
    ) -> tuple[Resolution | None, concurrent.futures.Future[Profile] | None]:
        found = snap.resolver.lookup(model, effort, client)
        if found is not None:
            return found, None
        return None, self._scheduler.start(model, effort or DEFAULT_EFFORT)

    def _unknown(self, snap: Snapshot, key: str, flight: concurrent.futures.Future[Profile] | None) -> Resolution:
        source: Source = "pending" if flight is not None and not flight.done() else "unmeasured"
        if snap.settings.unknown_models == "reject":
            raise NotMeasured(f"model {key!r} has not been measured yet ({source}); retry later")
        log.debug("fail_closed", key=key, tier=snap.settings.unknown_tier.value, source=source)
        return Resolution(snap.settings.unknown_tier, source, key)

    def tier_for(self, model: str, effort: str | None = None) -> tuple[Tier, Source]:
        resolution = self.resolve(model, effort)
        return resolution.tier, resolution.source

    async def atier_for(self, model: str, effort: str | None = None) -> tuple[Tier, Source]:
        resolution = await self.aresolve(model, effort)
        return resolution.tier, resolution.source

    # -- the tool policy -----------------------------------------------------------------------

    def filter_tools(self, model: str, effort: str | None, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools (OpenAI schemas) this model may see at its tier (and `tools.requires`)."""
        snap = self._snapshot
        resolution = self._resolve(snap, model, effort)
        return self._allowed(snap.router.policy_for(resolution), resolution.tier, tools)

    async def afilter_tools(self, model: str, effort: str | None, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        snap = self._snapshot
        resolution = await self._aresolve(snap, model, effort)
        return self._allowed(snap.router.policy_for(resolution), resolution.tier, tools)

    def allowed(self, tier: Tier, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The tools a pair at `tier` may see. No measurement is given, so a tool with category
        minimums (`tools.requires`) is hidden: use `filter_tools` to judge them."""
        snap = self._snapshot
        return self._allowed(snap.router.policy_for(Resolution(tier, "unmeasured", "")), tier, tools)

    @staticmethod
    def _allowed(policy: ToolPolicy, tier: Tier, tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
        # By identity: a built-in by its type and family (`web_search: large` hides `web_search_preview`).
        return [t for i, t in enumerate(tools) if policy.allows(tier, protocols.listed_tool_id(t, f"tools[{i}]"))]

    @property
    def requirements(self) -> Requirements:
        """`tools.requires`: category minimums per tool, judged on a pair's lower bounds."""
        return self._snapshot.router.requirements

    def capability(self, resolution: Resolution) -> Capability:
        """A resolved pair's tier and the measured bounds its category minimums are judged on."""
        return self._snapshot.router.capability(resolution)

    def policy_for(self, resolution: Resolution) -> ToolPolicy:
        """The tool policy as it applies to one resolved pair: the tier rules, and `tools.requires`
        judged on the pair's measured lower bounds (gate a request with it and its tier)."""
        return self._snapshot.router.policy_for(resolution)

    # -- capability routing (routing:) ---------------------------------------------------------

    def route(self, model: str, effort: str | None, tools: list[dict[str, Any]]) -> Route:
        """Which pair should serve a request for `model@effort` offering `tools` (a flat list in any
        protocol's shape, as `filter_tools` takes), and why: `Route.model`, `.effort`, `.reason`
        (escalated | economized | fallback | none), `.resolution` (the tier of the pair used) and
        `.policy` to gate with. Without a `routing:` section, or without tools, it is the asked
        pair (reason "none"). Resolves the asked pair like `resolve` (so it may wait under
        `unknown_models: wait`); candidates are never waited for: an unmeasured one is measured
        lazily and used once measured."""
        snap = self._snapshot
        # By identity, as filter_tools: a built-in by its type and family, any protocol's shape.
        names = [protocols.listed_tool_id(t, f"tools[{i}]") for i, t in enumerate(tools)]
        return self._route(snap, self._resolve(snap, model, effort), model, effort, names)

    async def aroute(self, model: str, effort: str | None, tools: list[dict[str, Any]]) -> Route:
        """`route` for async code."""
        snap = self._snapshot
        names = [protocols.listed_tool_id(t, f"tools[{i}]") for i, t in enumerate(tools)]
        return self._route(snap, await self._aresolve(snap, model, effort), model, effort, names)

    def route_resolved(
        self,
        asked: Resolution,
        names: Iterable[str | ToolId],
        targets: Sequence[str] = RANKED_EFFORTS,
        *,
        measure: bool = True,
    ) -> Route:
        """`route` for a pair already resolved (the proxy), given the offered tools (names or
        ToolIds) and the efforts the client's protocol can carry. Never blocks. `measure=False`
        (the CLI) starts no lazy measurement of unknown candidates."""
        model, effort = split_key(asked.key)
        return self._route(self._snapshot, asked, model, effort, names, targets, measure)

    def route_body(self, codec: Codec, body: dict[str, Any]) -> Route:
        """Route a client request body of `codec`'s protocol (sync; resolves like `resolve`): when
        routed, `body` is rewritten in place for the routed pair (model, and every field that sets
        the effort: gatekeeper.protocols.reroute). Gate it with the result's `resolution` and `policy`."""
        snap = self._snapshot
        info = codec.parse(body)
        asked = self._resolve(snap, info.model, info.effort)
        routed = snap.router.route_body(codec, body, info, asked)
        return routed or snap.router.route(asked, info.model, info.effort, None)

    def route_need(self, asked: Resolution, need: Need | None, *, measure: bool = True) -> Route:
        """`route_resolved` for a need computed by the caller (ToolRegistry's own tool tiers)."""
        model, effort = split_key(asked.key)
        return self._snapshot.router.route(asked, model, effort, need, measure=measure)

    @staticmethod
    def _route(
        snap: Snapshot,
        asked: Resolution,
        model: str,
        effort: str | None,
        names: Iterable[str | ToolId],
        targets: Sequence[str] = RANKED_EFFORTS,
        measure: bool = True,
    ) -> Route:
        router = snap.router
        need = router.need(names) if router.rules is not None else None
        return router.route(asked, model, effort, need, targets, measure=measure)

    def gate(self, body: dict[str, Any], model: str, effort: str | None = None) -> tuple[Resolution, Gated]:
        """Resolve the pair and gate a Chat Completions request body in place with the chat codec.

        Raises NotMeasured (policy `reject`), RequestInvalid and ToolChoiceBlocked.
        """
        snap = self._snapshot
        check_before_measuring(
            protocols.PROTOCOLS["chat"].codec, body, snap.policy, snap.resolver, model, effort
        )  # a refused body measures nothing
        return self._gate(snap, body, self._resolve(snap, model, effort))

    async def agate(self, body: dict[str, Any], model: str, effort: str | None = None) -> tuple[Resolution, Gated]:
        """`gate` for async code."""
        snap = self._snapshot
        check_before_measuring(protocols.PROTOCOLS["chat"].codec, body, snap.policy, snap.resolver, model, effort)
        return self._gate(snap, body, await self._aresolve(snap, model, effort))

    @staticmethod
    def _gate(snap: Snapshot, body: dict[str, Any], resolution: Resolution) -> tuple[Resolution, Gated]:
        return resolution, gate_resolved(
            protocols.PROTOCOLS["chat"].codec, body, resolution, snap.router.policy_for(resolution)
        )

    # -- profiles (for the admin API and the CLI) --------------------------------------------

    def profiles(self) -> dict[str, ProfileEntry]:
        """Every stored entry with its validity and what it counts for now."""
        snap = self._snapshot
        data = self.store.load()
        entries: dict[str, ProfileEntry] = {}
        for key, profile in sorted(data.profiles.items()):
            valid = profile.is_valid_for(snap.suite)
            pinned = snap.settings.pin_for(profile.model, profile.reasoning_effort) is not None
            source = "pinned" if pinned else "measured" if valid else "stale"
            entries[key] = ProfileEntry(key, profile, profile.to_json(), valid, source)
        for key, raw in sorted(data.invalid.items()):
            entries[key] = ProfileEntry(key, None, raw, False, "invalid")
        return entries

    def recommendations(self) -> dict[str, str]:
        return dict(self.store.load().recommendations)

    # -- measurement -----------------------------------------------------------------------

    def measure(self, model: str, effort: str | None = None) -> concurrent.futures.Future[Profile]:
        """Start (or join) the measurement of a pair, ignoring backoff and the lazy limits."""
        flight = self._scheduler.start(model, effort or DEFAULT_EFFORT, force=True)
        if flight is None:
            raise MeasurementFailed(f"{profile_key(model, effort)}: this Gatekeeper is closed")
        return flight

    def progress(self) -> list[Progress]:
        """The running measurements, and the latest finished one of each recently measured pair."""
        return self._scheduler.progress()

    def invalidate(self, model: str, effort: str | None = None) -> bool:
        """Remove the pair's profile (everywhere the store is shared); the next request re-measures it."""
        key = profile_key(model, effort)
        self._scheduler.forget_failures(key)
        removed = self.store.delete(key)
        self._forget()
        log.info("profile_invalidated", key=key, existed=removed)
        return removed

    def _changed(self, key: str) -> None:
        """Store listener: a profile landed or was removed (here or in another replica)."""
        self._forget()

    def _forget(self) -> None:
        self._snapshot.resolver.forget()
        for listener in list(self._tier_listeners):
            try:
                listener()
            except Exception:  # one broken listener must not stop the others or the caller
                log.exception("tier_listener_failed")

    def on_tier_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener()` whenever a pair's tier may have changed: a profile landed or was
        removed (here or in another replica), a drift demotion or its clearing, a reload. It is
        called from whichever thread saw the change and must not block. Returns its remover."""
        self._tier_listeners.append(listener)
        return lambda: self._tier_listeners.remove(listener) if listener in self._tier_listeners else None

    def _remeasure_drifting(self, key: str) -> None:
        """A pair demoted for everyone is measured again, within the lazy limits like any
        measurement a client's traffic causes (never `force`)."""
        model, effort = split_key(key)
        if self._scheduler.start(model, effort, fresh=True) is None:
            raise MeasurementFailed(f"{key}: the lazy limits refuse a measurement now (see measurement_refused)")

    async def _measure(self, model: str, effort: str, lease: Lease, progress: Progress) -> Profile:
        """The scheduler's measure step: the measurement service of the settings in force, saving
        fenced by the pair's lease."""
        profile = await self._snapshot.measurements.measure(model, effort, lease=lease, progress=progress)
        self.drift.profile_landed(profile.key, profile)  # a standing demotion stays: the lower tier is served
        self._forget()  # a re-measured pair must not keep its old tier
        return profile

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        """Cancel running measurements (releasing their leases) and close the store if we opened it.

        Safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        self.drift.close()
        self._scheduler.close()
        if self._owns_store:
            self.store.close()

    def __enter__(self) -> Gatekeeper:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> Gatekeeper:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)
