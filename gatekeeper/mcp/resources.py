"""What the gateway's servers offer besides tools: resources, resource templates, prompts and the
completions of the last two, routed to the server that has each and served only when the
session's tier admits it (the rules: gatekeeper.mcp.reads).

    resources/list, resources/templates/list, prompts/list -> what the tier admits
    resources/read, prompts/get, completion/complete -> hidden: JSON-RPC error, never forwarded

A resources/read goes to the server that lists the URI, else the one server whose template
matches it, else the one whose tool result linked to it (gatekeeper.mcp.gateway tells `linked`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from cachetools import TTLCache
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from gatekeeper.core.gatekeeper import Resolution
from gatekeeper.mcp.names import exposed_name, split_exposed
from gatekeeper.mcp.reads import Kind, ReadRules, ToolJudge, Verdict
from gatekeeper.mcp.upstream import ServerUnavailable, Upstream
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip

log = logs.get_logger(__name__)

_RESOURCE_ROUTES = 10_000  # resource URIs remembered for resources/read routing
# A resources/read of a URI no server listed lists them again (and their templates), but at
# most this often: a client looping over made-up URIs must not make every server list per read.
_ROUTE_REFRESH_S = 5.0

# A server's resource template: (as written, parsed, its server's label, its name).
_Template = tuple[str, UriTemplate, str, str]


@dataclass(frozen=True)
class Access:
    """What one request's tier may list and read besides tools (gatekeeper.mcp.reads)."""

    model: str  # as the refusals name it (Binding.shown)
    resolution: Resolution
    rules: ReadRules
    tools_shown: dict[str, bool]  # label -> the tier is shown at least one of that server's tools
    tool: ToolJudge  # what the tool policy says of a call of a tool (a read that acts as one)

    def judge(self, kind: Kind, label: str, name: str | None, uris: Sequence[str] = ()) -> Verdict:
        shown = self.tools_shown.get(label, False)
        return self.rules.judge(self.resolution.tier, kind, label, name, shown, uris, self.tool)

    def may(self, kind: Kind, label: str, name: str | None, uris: Sequence[str] = ()) -> bool:
        return self.judge(kind, label, name, uris).allowed

    def check(self, kind: Kind, label: str, name: str | None, what: str, uris: Sequence[str] = ()) -> None:
        """Raise the JSON-RPC refusal of `what` when the tier does not admit it (never forwarded)."""
        verdict = self.judge(kind, label, name, uris)
        if verdict.allowed:
            return
        tier, source = self.resolution.tier.value, self.resolution.source
        log.warning("mcp_read_refused", item=what, model=self.model, tier=tier, source=source)
        raise MCPError(
            types.INVALID_PARAMS,
            f"{what} of server {label!r} is not shown to model {self.model} at tier {tier} ({source}): "
            f"{verdict.why}; it was not forwarded",
            {
                "server": label,
                "required_tier": verdict.required.value if verdict.required is not None else None,
                "tier": tier,
                "source": source,
                "reason": "tier_too_low",
            },
        )


class ServerReads:
    """The gateway's handlers of resources, templates, prompts and completions, and the routes
    of resource URIs to servers. `access` gives a request's Access (its tier and the rules)."""

    def __init__(
        self,
        upstreams: Mapping[str, Upstream],
        access: Callable[[ServerRequestContext[Any]], Awaitable[Access]],
    ) -> None:
        self.upstreams = upstreams
        self._access = access
        # URI -> (label, name) of the server that lists it, and the resource's name (its rules').
        self._resource_server: TTLCache[str, tuple[str, str]] = TTLCache(
            maxsize=_RESOURCE_ROUTES, ttl=3600, timer=time.monotonic
        )
        # URIs a tool result linked to, by the server whose result it was: a route only when no
        # server lists the URI (a server cannot take over another's listed resource by linking it).
        self._linked_resource: TTLCache[str, str] = TTLCache(maxsize=_RESOURCE_ROUTES, ttl=3600, timer=time.monotonic)
        self._resources_listed_at = -_ROUTE_REFRESH_S
        self._parsed_templates: tuple[float, list[_Template]] = (-_ROUTE_REFRESH_S, [])
        self._routing = anyio.Lock()  # one refresh at a time: the reads that wait for it use it

    def forget_listings(self) -> None:
        """A server came up, went down or listed again: its resources and templates may have
        changed with it, so the next miss asks again."""
        self._resources_listed_at = -_ROUTE_REFRESH_S
        self._parsed_templates = (-_ROUTE_REFRESH_S, [])

    def linked(self, label: str, content: Sequence[Any]) -> None:
        """A tool result of server `label`: a resource it links to is read from that server."""
        for item in content:
            if isinstance(item, (types.ResourceLink, types.EmbeddedResource)):
                uri = item.uri if isinstance(item, types.ResourceLink) else item.resource.uri
                self._linked_resource[str(uri)] = label

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        reads = await self._access(ctx)
        listed = await self._resource_list()
        return types.ListResourcesResult(
            resources=[r for r, label in listed if reads.may("resource", label, r.name, (str(r.uri),))]
        )

    async def _resource_list(self) -> list[tuple[types.Resource, str]]:
        """Every up server's resources with its label; each URI remembered with its server and
        name, for resources/read."""
        self._resources_listed_at = time.monotonic()
        found: list[tuple[types.Resource, str]] = []
        for label, upstream in self.upstreams.items():
            if upstream.session is None:
                continue
            try:
                resources = await upstream.list_resources()
            except (ServerUnavailable, MCPError) as exc:
                log.warning("mcp_resources_unavailable", server=label, error=str(exc)[:300])
                continue
            for resource in resources:
                self._resource_server[str(resource.uri)] = (label, resource.name)
            found += [(resource, label) for resource in resources]
        return found

    async def read_resource(
        self, ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        reads = await self._access(ctx)
        uri = str(params.uri)
        label, names, templates = await self._resource_route(uri)
        for name in names:  # judged before the read: a template's read may act
            reads.check("resource", label, name, f"resource {clip(uri, 300)!r}", (uri, *templates))
        try:
            return await self.upstreams[label].read_resource(uri)
        except ServerUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None

    async def _resource_route(self, uri: str) -> tuple[str, tuple[str | None, ...], tuple[str, ...]]:
        """The label of the server to read `uri` from, the names it is ruled by and the templates
        (as written) it was routed by: the one that lists it (asked again now if nobody listed it
        lately), else the one server whose templates match it (every matching one's name and
        template), else the one whose tool result linked to it (no name: its server's default);
        refused when none (or several servers' templates) say so."""
        found = self._resource_server.get(uri)
        if found is None:
            async with self._routing:
                if time.monotonic() - self._resources_listed_at >= _ROUTE_REFRESH_S:
                    await self._resource_list()
            found = self._resource_server.get(uri)
        if found is not None:
            return found[0], (found[1],), ()
        matching = [
            (owner, name, written)
            for written, template, owner, name in await self._templates()
            if template.match(uri) is not None
        ]
        owners = {owner for owner, _, _ in matching}
        if len(owners) == 1:
            return owners.pop(), tuple(name for _, name, _ in matching), tuple(w for _, _, w in matching)
        linked = self._linked_resource.get(uri)
        if linked is not None and not owners:
            return linked, (None,), ()
        why = (
            f"the templates of the servers {sorted(owners)} all match it"
            if owners
            else "no server lists it, has a template for it or linked to it"
        )
        raise MCPError(-32002, f"Resource not found: {clip(uri, 300)} ({why})", {"uri": clip(uri, 300)})

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        reads = await self._access(ctx)
        listed = await self._template_list()
        return types.ListResourceTemplatesResult(
            resource_templates=[t for t, label in listed if reads.may("resource", label, t.name, (t.uri_template,))]
        )

    async def _template_list(self) -> list[tuple[types.ResourceTemplate, str]]:
        """Every up server's resource templates, with the label of the server that has each."""
        found: list[tuple[types.ResourceTemplate, str]] = []
        for label, upstream in self.upstreams.items():
            if upstream.session is None:
                continue
            try:
                found += [(template, label) for template in await upstream.list_resource_templates()]
            except (ServerUnavailable, MCPError) as exc:
                log.warning("mcp_resource_templates_unavailable", server=label, error=str(exc)[:300])
        return found

    async def _templates(self) -> list[_Template]:
        """The servers' templates (as written, parsed, the label of the server that has each, its
        name), for routing a resources/read or a completion (one that does not parse is no
        route), listed again at most every _ROUTE_REFRESH_S."""
        async with self._routing:
            listed_at, parsed = self._parsed_templates
            if time.monotonic() - listed_at < _ROUTE_REFRESH_S:
                return parsed
            parsed = []
            for template, label in await self._template_list():
                with contextlib.suppress(InvalidUriTemplate):
                    written = template.uri_template
                    parsed.append((written, UriTemplate.parse(written), label, template.name))
            self._parsed_templates = (time.monotonic(), parsed)
            return parsed

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        reads = await self._access(ctx)
        found: list[types.Prompt] = []
        for label, upstream in self.upstreams.items():
            if upstream.session is None:
                continue
            try:
                prompts = await upstream.list_prompts()
            except (ServerUnavailable, MCPError) as exc:
                log.warning("mcp_prompts_unavailable", server=label, error=str(exc)[:300])
                continue
            found += [
                p.model_copy(update={"name": exposed_name(label, p.name)})
                for p in prompts
                if reads.may("prompt", label, p.name)
            ]
        return types.ListPromptsResult(prompts=found)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        reads = await self._access(ctx)
        parts = split_exposed(params.name)
        upstream = self.upstreams.get(parts[0]) if parts is not None else None
        if parts is None or upstream is None:
            raise MCPError(types.INVALID_PARAMS, f"Unknown prompt {params.name[:200]!r}")
        reads.check("prompt", parts[0], parts[1], f"prompt {clip(params.name, 200)!r}")
        try:
            return await upstream.get_prompt(parts[1], params.arguments)
        except ServerUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None

    async def complete(
        self, ctx: ServerRequestContext[Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        """A completion, asked of the server whose prompt (`<label>__<prompt>`) or resource
        template it names, when the tier admits that prompt or template."""
        reads = await self._access(ctx)
        ref = params.ref
        if isinstance(ref, types.PromptReference):
            parts = split_exposed(ref.name)
            if parts is None or parts[0] not in self.upstreams:
                raise MCPError(types.INVALID_PARAMS, f"Unknown prompt {clip(ref.name, 200)!r}")
            reads.check("prompt", parts[0], parts[1], f"completion of prompt {clip(ref.name, 200)!r}")
            label, ref = parts[0], ref.model_copy(update={"name": parts[1]})
        else:
            matching = [(owner, name) for written, _, owner, name in await self._templates() if written == ref.uri]
            owners = {owner for owner, _ in matching}
            if len(owners) != 1:
                why = f"the servers {sorted(owners)} all have it" if owners else "no server has it"
                raise MCPError(types.INVALID_PARAMS, f"Unknown resource template {clip(ref.uri, 300)!r} ({why})")
            label = owners.pop()
            for _, name in matching:
                what = f"completion of resource template {clip(ref.uri, 300)!r}"
                reads.check("resource", label, name, what, (ref.uri,))
        context = params.context.arguments if params.context is not None else None
        argument = {"name": params.argument.name, "value": params.argument.value}
        try:
            return await self.upstreams[label].complete(ref, argument, context)
        except ServerUnavailable as exc:
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
