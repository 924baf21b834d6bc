"""The gateway's MCP server: the union of the upstream servers' tools, resources, resource
templates and prompts, filtered by the tier of the model a session is bound to, and calls, reads
and completions forwarded only when that tier admits what they name.

    client --tools/list--> tier (Gatekeeper.aresolve) -> tools the tier admits, `<label>__<tool>`
    client --tools/call--> hidden or unknown: JSON-RPC error, never forwarded
                           allowed: forwarded to the server, its result relayed (progress too)
    client --resources/*, prompts/*, completion/complete--> the same (gatekeeper.mcp.resources)

The tier comes from the same core as the proxy (pins, valid profiles, drift demotions, the
`unknown_models` policy; an unknown model is measured lazily within the lazy caps). When it may
have changed (a measurement landed, a demotion, a reload) or a server's tools changed, every open
session whose visible tools differ gets `notifications/tools/list_changed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from gatekeeper.core.gatekeeper import Gatekeeper, Resolution
from gatekeeper.errors import NotMeasured
from gatekeeper.mcp import metrics
from gatekeeper.mcp.names import exposed_name, split_exposed
from gatekeeper.mcp.reads import ReadRules, UriRule
from gatekeeper.mcp.resources import Access, ServerReads
from gatekeeper.mcp.upstream import ServerUnavailable, Upstream
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolId

log = logs.get_logger(__name__)

# The scope key the HTTP front (gatekeeper.mcp.http) puts the request's Binding under.
BINDING = "gatekeeper.mcp.binding"
PAGE_SIZE = 100  # tools per tools/list page
_MAX_SESSIONS = 10_000  # the SDK's default limit on open sessions; watched sessions are bounded alike
_NOTIFY_TIMEOUT_S = 5.0


# An offered tool: (the tool as exposed, the identity rules judge, its label, its fingerprint).
_Offered = tuple[types.Tool, ToolId, str, str]


@dataclass(frozen=True)
class Binding:
    """Who a request speaks for: the model (`None`: no model named, the unknown tier), and the
    client's drift identity (gatekeeper.drift.identity), so a demotion of the model for that
    client applies at this door as it does at the proxy (None: everyone's demotions only)."""

    model: str | None
    effort: str | None
    client: str | None = None

    @property
    def shown(self) -> str:
        if self.model is None:
            return "(no model)"
        return f"{self.model}@{self.effort}" if self.effort else self.model


def key_digest(key: str) -> str:
    """What the gateway remembers of an `mcp.api_keys` key: enough to tell keys apart, nothing
    that gives the key back."""
    return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class _Watched:
    """An open session that listed tools: the tools (name, definition's fingerprint) it was last
    told of, and those its last tools/list returned (what its model was shown)."""

    session: ServerSession
    binding: Binding
    shown: frozenset[tuple[str, str]]
    listed: dict[str, str]


class _Server(Server[Any]):
    # The session manager builds initialization options itself; the tools capability must say
    # `listChanged: true` so clients listen for the notification this gateway sends.
    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        options = notification_options or NotificationOptions(tools_changed=True)
        return super().create_initialization_options(options, experimental_capabilities, extensions)


class McpGateway:
    """The MCP gateway over a Gatekeeper: its upstream servers, its MCP server and its sessions.

    `running()` (entered by the proxy's lifespan) connects the servers and serves sessions.
    """

    def __init__(self, gk: Gatekeeper) -> None:
        self.gk = gk
        self.upstreams = {
            label: Upstream(label, config, self._tools_changed) for label, config in gk.settings.mcp.servers.items()
        }
        self._servers_started = gk.settings.mcp.servers
        self.reads = ServerReads(self.upstreams, self._access)  # resources, templates, prompts
        self.server = _Server(
            "gatekeeper",
            version="1",
            instructions="Tools of several MCP servers, named <server>__<tool>, shown by the measured tier of your model.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self.reads.list_resources,
            on_read_resource=self.reads.read_resource,
            on_list_resource_templates=self.reads.list_resource_templates,
            on_list_prompts=self.reads.list_prompts,
            on_get_prompt=self.reads.get_prompt,
            on_completion=self.reads.complete,
        )
        self.manager = StreamableHTTPSessionManager(self.server, max_sessions=_MAX_SESSIONS)
        # Sessions that listed tools, by session id, for as long as the SDK keeps them open: an
        # agent that lists once and then only calls (or only holds its GET stream) must still hear
        # list_changed hours later. Closed ones are pruned (gatekeeper.mcp.gateway._prune).
        self._watched: dict[str, _Watched] = {}
        # URI -> (label, name) of the server that lists it, and the resource's name (its rules').
        # Requests in flight by the digest of their key (a GET stream lasts as long as its client
        # keeps it): a reload that removes the key ends them, so a revoked key hears nothing more.
        self._in_flight: dict[str, set[anyio.CancelScope]] = {}
        # What the console shows, per (server, model): listed, hidden, refused. `model` is the
        # bounded metrics label, so this table is bounded too.
        self.tallies: dict[tuple[str, str], dict[str, int]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._recheck = asyncio.Event()
        self._unsubscribe: Callable[[], None] = lambda: None

    # -- lifecycle -----------------------------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self._loop = asyncio.get_running_loop()
        self._unsubscribe = self.gk.on_tier_change(self._tiers_changed)
        for label in self.upstreams:
            metrics.SERVER_UP.labels(label).set(0)
        try:
            async with self.manager.run(), anyio.create_task_group() as tg:
                for upstream in self.upstreams.values():
                    tg.start_soon(upstream.run)
                tg.start_soon(self._notifier)
                try:
                    yield
                finally:
                    tg.cancel_scope.cancel()
        finally:
            self._unsubscribe()
            self._loop = None

    def _tiers_changed(self) -> None:
        """Gatekeeper listener: may be called from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._recheck.set)

    def _tools_changed(self) -> None:
        """Upstream listener (on the loop): a server came up, went down or listed again."""
        self.reads.forget_listings()  # its resources and templates may have changed with it
        for label, upstream in self.upstreams.items():
            metrics.SERVER_UP.labels(label).set(1 if upstream.session is not None else 0)
        self._recheck.set()

    async def _notifier(self) -> None:
        """One task sends every list_changed: changes that land together cost one pass."""
        while True:
            await self._recheck.wait()
            self._recheck.clear()
            await anyio.sleep(0.05)  # let a burst of changes (a reload, a server relisting) settle
            if self.gk.settings.mcp.servers != self._servers_started:
                self._servers_started = self.gk.settings.mcp.servers  # said once per change
                log.warning("mcp_servers_changed", detail="mcp.servers takes effect at the next restart")
            self._prune()
            self._end_revoked()
            # Sessions of one model see the same tools: judged once per model and pass, however
            # many sessions it has open.
            catalogue = self._catalogue()
            visible: dict[Binding, frozenset[tuple[str, str]]] = {}
            # All at once: a session whose client does not read its stream costs its own
            # timeout, not everyone's (one after the other, a hundred such cost 500 s per pass).
            async with anyio.create_task_group() as tg:
                for session_id, watched in list(self._watched.items()):
                    names = visible.get(watched.binding)
                    if names is None:
                        names = visible[watched.binding] = self._visible_now(watched.binding, catalogue)
                    tg.start_soon(self._tell_or_forget, session_id, watched, names)

    async def _tell_or_forget(self, session_id: str, watched: _Watched, names: frozenset[tuple[str, str]]) -> None:
        try:
            await self._tell(watched, names)
        except Exception as exc:  # noqa: BLE001 - the session is gone or stuck: forget it, tell the others
            log.info("mcp_session_gone", session=session_id[:12], error=type(exc).__name__)
            self._watched.pop(session_id, None)

    def _visible_now(self, binding: Binding, catalogue: list[_Offered]) -> frozenset[tuple[str, str]]:
        """The tools `binding` would be shown now, with their fingerprints (a definition that
        changes is a change to tell, as a tool that comes or goes is)."""
        # The tier as it stands, without waiting for or starting a measurement: this loop serves
        # every session, and the client's own tools/list that follows resolves as usual.
        found = self.gk.lookup(binding.model, binding.effort, binding.client) if binding.model is not None else None
        resolution = found or Resolution(self.gk.settings.unknown_tier, "unmeasured", binding.shown)
        policy = self.gk.policy_for(resolution)
        return frozenset((t.name, fp) for t, rule, _, fp in catalogue if policy.allows(resolution.tier, rule))

    async def _tell(self, watched: _Watched, names: frozenset[tuple[str, str]]) -> None:
        """Send list_changed to one session if the tools it would be shown now differ."""
        binding = watched.binding
        if names == watched.shown:
            return
        watched.shown = names
        with anyio.fail_after(_NOTIFY_TIMEOUT_S):  # a client that does not read its stream is dropped
            await watched.session.send_tool_list_changed()
        metrics.LIST_CHANGED.inc()
        log.info("mcp_tools_list_changed", model=binding.shown, tools=len(names))

    # -- tiers and visibility ------------------------------------------------------------------

    async def _resolve(self, binding: Binding) -> Resolution:
        if binding.model is None:
            # No model named: the unknown tier, and nothing to measure.
            return Resolution(self.gk.settings.unknown_tier, "unmeasured", "(no model)")
        try:
            return await self.gk.aresolve(binding.model, binding.effort, binding.client)
        except NotMeasured as exc:  # unknown_models: reject
            raise MCPError(types.INVALID_REQUEST, str(exc)) from None

    def _catalogue(self) -> list[_Offered]:
        """Every offered tool: (the tool as exposed, the identity rules judge, its label, the
        fingerprint of its definition)."""
        found = []
        for label, upstream in self.upstreams.items():
            for name, tool in upstream.tools.items():
                exposed = tool.model_copy(update={"name": exposed_name(label, name)})
                found.append((exposed, ToolId.mcp(label, name), label, upstream.fingerprints[name]))
        return found

    async def _access(self, ctx: ServerRequestContext[Any]) -> Access:
        """What this request's tier may list and read besides tools (gatekeeper.mcp.resources)."""
        binding = _binding(ctx)
        resolution = await self._resolve(binding)
        policy = self.gk.policy_for(resolution)
        mcp = self.gk.settings.mcp
        uris = [UriRule(r.uri, r.server, r.tier, "" if r.action else r.acts_as) for r in mcp.resource_uris]
        defaults = {label: s.default_tier for label, s in mcp.servers.items()}
        rules = ReadRules(mcp.resources, mcp.prompts, defaults, uris)
        shown = {
            label: any(policy.allows(resolution.tier, ToolId.mcp(label, name)) for name in upstream.tools)
            for label, upstream in self.upstreams.items()
        }

        def tool(name: str) -> tuple[bool, Tier]:
            """A read that acts as the tool `name` (`label.tool`, or a bare name) is judged as its call."""
            label, dot, bare = name.partition(".")
            rule = ToolId.mcp(label, bare) if dot else ToolId.function(name)
            return policy.allows(resolution.tier, rule), policy.required_tier(rule)

        return Access(binding.shown, resolution, rules, shown, tool)

    @staticmethod
    def _model_label(resolution: Resolution) -> str:
        return resolution.key if resolution.source in ("measured", "pinned", "demoted") else "unmeasured"

    # -- tools ---------------------------------------------------------------------------------

    async def _list_tools(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        binding = _binding(ctx)
        resolution = await self._resolve(binding)
        policy = self.gk.policy_for(resolution)
        shown: list[types.Tool] = []
        fingerprints: dict[str, str] = {}
        counts: dict[str, list[int]] = {label: [0, 0] for label in self.upstreams}
        for tool, rule, label, fp in self._catalogue():
            allowed = policy.allows(resolution.tier, rule)
            counts[label][0 if allowed else 1] += 1
            if allowed:
                # Argument rules may admit only some calls at this tier: the schema says which.
                narrowed = policy.narrowed(resolution.tier, rule, tool.input_schema)
                shown.append(tool if narrowed is None else tool.model_copy(update={"input_schema": narrowed}))
                fingerprints[tool.name] = fp
        start = _offset(params.cursor if params is not None else None, len(shown))
        if start == 0:  # one listing counts once, however many pages it is read in
            model = self._model_label(resolution)
            for label, (listed, hidden) in counts.items():
                metrics.TOOLS_LISTED.labels(label, model).inc(listed)
                metrics.TOOLS_HIDDEN.labels(label, model).inc(hidden)
                self._tally(label, model, listed=listed, hidden=hidden)
        self._watch(ctx, binding, fingerprints)
        page = shown[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(shown)
        log.debug("mcp_tools_listed", model=binding.shown, tier=resolution.tier.value, shown=len(shown))
        return types.ListToolsResult(tools=page, next_cursor=f"p{start + PAGE_SIZE}" if more else None)

    def _watch(self, ctx: ServerRequestContext[Any], binding: Binding, listed: dict[str, str]) -> None:
        session_id = _session_id(ctx)
        if session_id is None:
            return
        if session_id not in self._watched and len(self._watched) >= _MAX_SESSIONS:
            self._prune()
            if len(self._watched) >= _MAX_SESSIONS:  # only if the SDK's own bound was raised
                self._watched.pop(next(iter(self._watched)))
        self._watched[session_id] = _Watched(ctx.session, binding, frozenset(listed.items()), listed)

    @contextlib.contextmanager
    def in_flight(self, digest: str) -> Iterator[None]:
        """Serve one request of the key `digest` in a scope that a revocation of the key ends."""
        scope = anyio.CancelScope()
        self._in_flight.setdefault(digest, set()).add(scope)
        try:
            with scope:
                yield
        finally:
            scopes = self._in_flight.get(digest, set())
            scopes.discard(scope)
            if not scopes:
                self._in_flight.pop(digest, None)

    def _end_revoked(self) -> None:
        """End the requests in flight (GET streams too) of keys no longer in `mcp.api_keys`."""
        kept = {key_digest(key) for key in self.gk.settings.mcp.keys}
        for digest, scopes in list(self._in_flight.items()):
            if digest not in kept:
                log.warning("mcp_key_revoked", requests_ended=len(scopes))
                for scope in scopes:
                    scope.cancel()

    def forget_session(self, session_id: str) -> None:
        self._watched.pop(session_id, None)

    def _prune(self) -> None:
        """Forget the watched sessions the SDK has closed (idle timeout, crash, DELETE)."""
        # The session manager's own table of open sessions (it has no public view of it); without
        # it (another SDK version) nothing is pruned and a closed session is forgotten when a
        # notification to it fails.
        open_ids = getattr(self.manager, "_server_instances", None)
        if not isinstance(open_ids, dict):
            return
        for session_id in [s for s in self._watched if s not in open_ids]:
            del self._watched[session_id]

    async def _call_tool(
        self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        binding = _binding(ctx)
        resolution = await self._resolve(binding)
        model = self._model_label(resolution)
        name = params.name
        parts = split_exposed(name)
        upstream = self.upstreams.get(parts[0]) if parts is not None else None
        if parts is None or upstream is None or parts[1] not in upstream.tools:
            server = parts[0] if upstream is not None and parts else "(none)"
            metrics.CALLS_REFUSED.labels(server, model).inc()
            self._tally(server, model, refused=1)
            log.warning("mcp_call_refused", tool=name[:200], model=binding.shown, reason="unknown")
            # Why a server is down (its URL, its command's path) is the log's and the console's.
            offered = "no server behind this gateway offers it" + (
                f" (server {parts[0]!r} is unavailable: {upstream.reason})"
                if upstream is not None and upstream.reason and parts
                else ""
            )
            raise MCPError(
                types.INVALID_PARAMS,
                f"Unknown tool {name[:200]!r}: {offered}; the call was not forwarded",
                {"tool": name[:200], "reason": "unknown_tool"},
            )
        label, tool = parts
        policy, rule = self.gk.policy_for(resolution), ToolId.mcp(label, tool)
        if not policy.allows(resolution.tier, rule):
            needs = policy.required_tier(rule)
            tier_ok = resolution.tier.allows(needs)
            why = (
                f"needs the category minimums {self.gk.requirements.of(rule)} (tools.requires), which the "
                f"measured bounds of model {binding.shown} do not meet"
                if tier_ok
                else f"needs tier {needs.value}; model {binding.shown} is at tier {resolution.tier.value} "
                f"({resolution.source})"
            )
            reason = "requirements_unmet" if tier_ok else "tier_too_low"
            self._refuse(name, label, model, binding, resolution, needs, reason, f"Tool {name!r} {why}")
        arguments = params.arguments if params.arguments is not None else {}
        if not policy.admits_call(resolution.tier, rule, arguments):
            # tools.arguments: this call's arguments need more than the tier (never logged: values).
            needs = policy.call_tier(rule, arguments)
            why = (
                f"Tool {name!r} with these arguments needs tier {needs.value} (tools.arguments); model "
                f"{binding.shown} is at tier {resolution.tier.value} ({resolution.source})"
            )
            self._refuse(name, label, model, binding, resolution, needs, "arguments_tier_too_low", why)
        session_id = _session_id(ctx)
        watched = self._watched.get(session_id) if session_id is not None else None
        listed = watched.listed.get(name) if watched is not None else None
        if listed is not None and listed != upstream.fingerprints[tool]:
            # A "rug pull": the server redefined the tool after this session's model was shown
            # it; the arguments were written for the definition the model saw. The session was
            # told (list_changed) and is served again once it has listed the new one.
            metrics.CALLS_REFUSED.labels(label, model).inc()
            self._tally(label, model, refused=1)
            log.warning("mcp_call_refused", tool=name, model=binding.shown, reason="tool_changed")
            raise MCPError(
                types.INVALID_PARAMS,
                f"Tool {name!r} was redefined by its server since this session listed it (its description, "
                "schema or annotations changed); list the tools again before calling it; the call was not forwarded",
                {"tool": name, "reason": "tool_changed"},
            )

        async def relay_progress(progress: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(progress, total, message)  # a no-op unless the client asked

        try:
            result = await upstream.call_tool(tool, params.arguments, relay_progress)
        except ServerUnavailable as exc:
            metrics.CALLS_FORWARDED.labels(label, model, "failed").inc()
            raise MCPError(types.INTERNAL_ERROR, str(exc), {"tool": name, "reason": "server_unavailable"}) from None
        except MCPError as exc:
            metrics.CALLS_FORWARDED.labels(label, model, "failed").inc()
            raise MCPError(exc.code, f"MCP server {label!r}: {exc.message}", exc.data) from None
        self.reads.linked(label, result.content)  # a resource it links to is read from this server
        metrics.CALLS_FORWARDED.labels(label, model, "tool_error" if result.is_error else "ok").inc()
        log.info("mcp_call", tool=name, model=binding.shown, tier=resolution.tier.value, is_error=result.is_error)
        return result

    # -- what the console shows -------------------------------------------------------------

    def _refuse(
        self,
        name: str,
        label: str,
        model: str,
        binding: Binding,
        resolution: Resolution,
        needs: Tier,
        reason: str,
        why: str,
    ) -> NoReturn:
        """Count, log and refuse a call the model's tier may not make (its arguments never logged)."""
        metrics.CALLS_REFUSED.labels(label, model).inc()
        self._tally(label, model, refused=1)
        log.warning(
            "mcp_call_refused",
            tool=name,
            model=binding.shown,
            tier=resolution.tier.value,
            required=needs.value,
            source=resolution.source,
            **({"reason": "arguments"} if reason == "arguments_tier_too_low" else {}),
        )
        raise MCPError(
            types.INVALID_PARAMS,
            f"{why}; the call was not forwarded",
            {
                "tool": name,
                "required_tier": needs.value,
                "tier": resolution.tier.value,
                "source": resolution.source,
                "reason": reason,
            },
        )

    def _tally(self, server: str, model: str, **counts: int) -> None:
        row = self.tallies.setdefault((server, model), {"listed": 0, "hidden": 0, "refused": 0})
        for name, n in counts.items():
            row[name] += n

    def status(self) -> list[dict[str, Any]]:
        return [upstream.status() for upstream in self.upstreams.values()]

    @property
    def open_sessions(self) -> int:
        self._prune()
        return len(self._watched)


def _session_id(ctx: ServerRequestContext[Any]) -> str | None:
    """The id of the handshake-era session the request belongs to, or None."""
    request = ctx.request
    session_id = request.headers.get("mcp-session-id") if request is not None else None
    # Sessionless requests (the 2026 single-exchange era) have none. Their `mcp-session-id`
    # header is not checked by the SDK (it routes by protocol version): taken at its word, it
    # let one client overwrite another's watch by naming its session.
    if not session_id or ctx.session.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        return None
    return str(session_id)


def _binding(ctx: ServerRequestContext[Any]) -> Binding:
    """The model the HTTP front bound this request to; without one (it cannot happen through the
    front), the unknown tier."""
    request = ctx.request
    binding = request.scope.get(BINDING) if request is not None else None
    return binding if isinstance(binding, Binding) else Binding(None, None)


def _offset(cursor: str | None, total: int) -> int:
    if cursor is None:
        return 0
    digits = cursor[1:] if cursor.startswith("p") else ""
    # ASCII digits only, and few of them: `str.isdigit` also takes `²` and `１`, and int() refuses
    # strings over 4300 digits; either was an internal error instead of this one.
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 9) or int(digits) > total:
        raise MCPError(
            types.INVALID_PARAMS, f"invalid cursor {clip(cursor, 40)!r} (use the nextCursor of a tools/list)"
        )
    return int(digits)
