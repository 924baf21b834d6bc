"""The YAML config file -> typed, validated settings."""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gatekeeper.drift.window import DriftSettings
from gatekeeper.errors import ConfigError
from gatekeeper.observe.redact import clip
from gatekeeper.protocols import table as protocol_table
from gatekeeper.rules.arguments import ArgumentRule
from gatekeeper.rules.budget import BudgetMode
from gatekeeper.rules.clients import ClientRules
from gatekeeper.rules.mcp_identity import ServerBindings, normalise_url
from gatekeeper.rules.tiers import DEFAULT_RISK, DEFAULT_SAMPLES, Thresholds, Tier
from gatekeeper.store.profile import EFFORT_NAME, EFFORTS
from gatekeeper.store.schemes import checked_location
from gatekeeper.suite.loader import CATEGORIES, DEFAULT_SUITE_DIR, Category

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


class _Section(BaseModel):
    # Frozen: settings never change under a running request; `Gatekeeper.reload` swaps them whole.
    model_config = ConfigDict(extra="forbid", frozen=True)


class Upstream(_Section):
    base_url: str = "http://127.0.0.1:8080/v1"
    api_key: str | None = None
    timeout_s: float = Field(default=600.0, gt=0)
    max_connections: int = Field(default=512, ge=1)
    # Client protocols the upstream speaks natively (chat | responses | messages: the registered
    # ones, protocols/table.py); the others are translated to chat.
    protocols: list[str] = Field(default=["chat"], min_length=1)
    # An answer (plain body or whole stream) larger than this is a 502: a hostile or broken
    # upstream must not make the proxy buffer without bound. Generous: long answers are ~1 MB.
    max_response_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    # A request field the client protocol's codec does not know (protocols/<protocol>/fields.py): refused
    # with a 400 naming it, or dropped (and logged) before the request goes upstream.
    unknown_fields: Literal["refuse", "drop"] = "refuse"
    # Client headers sent on to the upstream: the "known" ones (server/upstream.py FORWARDED) and
    # those `forward_headers` lists (names, or prefixes ending in "*"); or "all" but hop-by-hop
    # ones. Closed by default: an upstream gateway may read request parameters from a header.
    client_headers: Literal["known", "all"] = "known"
    forward_headers: list[str] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not re.match(r"^https?://[^/]+", value) or not value.isprintable() or " " in value:
            raise ValueError(f"expected an http(s) URL, got {value!r}")
        return value.rstrip("/")

    @field_validator("api_key")
    @classmethod
    def _one_line(cls, value: str | None) -> str | None:
        if value is not None and not value.isprintable():  # it goes into a request's header
            raise ValueError("contains a control character (a line break?)")
        return value

    @field_validator("protocols")
    @classmethod
    def _served_protocols(cls, value: list[str]) -> list[str]:
        for name in value:
            if protocol_table.protocol(name) is None:
                raise ValueError(
                    f"{clip(name)!r} is not a protocol gatekeeper serves: {', '.join(protocol_table.served())}"
                )
        return value

    @field_validator("forward_headers")
    @classmethod
    def _header_names(cls, value: list[str]) -> list[str]:
        for i, name in enumerate(value):
            if not re.fullmatch(r"[A-Za-z0-9!#$%&'+.^_`|~-]+\*?", name):
                raise ValueError(f"[{i}] {name!r}: expected a header name, or a prefix ending in '*'")
        return [name.lower() for name in value]


class ModelRoute(_Section):
    """A model name agents send, served through litellm instead of the upstream."""

    name: str = Field(min_length=1)
    litellm_model: str = Field(min_length=1)
    api_key: str | None = None
    api_base: str | None = None


class McpServerIdentity(_Section):
    """What identifies one MCP server in a request (`tools.mcp_servers.<label>`): a server offered
    with one of these is gated by `<label>`'s rules whatever the client calls it, and one offered
    as `<label>` with none of them is refused (gatekeeper.rules.mcp_identity)."""

    urls: list[str] = Field(default_factory=list)  # Responses `server_url`, Messages `url`
    connectors: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)  # Responses `connector_id`
    tunnels: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)  # Responses `tunnel_id`

    @field_validator("urls")
    @classmethod
    def _server_urls(cls, value: list[str]) -> list[str]:
        for i, url in enumerate(value):
            if normalise_url(url) is None:
                raise ValueError(f"[{i}] {url!r}: expected an http(s) URL with a host")
        return value

    @model_validator(mode="after")
    def _something(self) -> McpServerIdentity:
        if not (self.urls or self.connectors or self.tunnels):
            raise ValueError("expected at least one of urls, connectors, tunnels (a binding to nothing binds nothing)")
        return self


class ToolRules(_Section):
    default_tier: Tier = Tier.SMALL
    required_tier: dict[str, Tier] = Field(default_factory=dict)
    # Category minimums per tool (name or shell-style pattern), judged on the measurement's lower
    # bound: `"emit_invoice": {json: 0.9}` (gatekeeper.rules.requirements).
    requires: dict[str, dict[Category, Annotated[float, Field(ge=0, le=1)]]] = Field(default_factory=dict)
    # MCP server label -> what identifies that server in a request (gatekeeper.rules.mcp_identity).
    mcp_servers: dict[str, McpServerIdentity] = Field(default_factory=dict)
    # Tool name or shell-style pattern -> entries `{match: {<argument path>: <pattern> | {regex}
    # | {equals} | {type}}, tier}`: the tier a call needs from its arguments (gatekeeper.rules.arguments).
    arguments: dict[str, list[ArgumentRule]] = Field(default_factory=dict)
    # A request offering more tools than its pair's budget (gatekeeper.rules.budget): `report`
    # (forwarded, with a header, a log line and a metric), `trim`, `refuse` (400) or `route`.
    # `report` by default: it changes no request, and a budget is a lower bound (a conservative
    # one: cutting to it also cuts tools the model could have used).
    budget: BudgetMode = "report"
    # Under `trim`: tools (names or shell-style patterns) kept first, in this order, after the
    # ones the conversation already used; then the client's order.
    budget_priority: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)

    @field_validator("mcp_servers")
    @classmethod
    def _bindings(cls, value: dict[str, McpServerIdentity]) -> dict[str, McpServerIdentity]:
        for label in value:
            if not label or any(c in label for c in ".*?[ ") or not label.isprintable():
                raise ValueError(
                    f"{label!r}: a label is a server's name as rules spell it, without '.', spaces or wildcards"
                )
        _ = ServerBindings.of({label: server.model_dump() for label, server in value.items()})  # one owner each
        return value


class Pin(_Section):
    """A pin with more than a tier (`pins: {"my-model": {tier: medium, tool_budget: 16}}`): the
    tool budget the admin vouches for (the largest number of offered tools the model chooses
    among reliably; absent: no budget applies, as for a profile that never measured one)."""

    tier: Tier
    tool_budget: int | None = Field(default=None, ge=1)


def pinned_tier(pin: Tier | Pin) -> Tier:
    """A pin's tier, whichever form it was written in."""
    return pin.tier if isinstance(pin, Pin) else pin


RankedEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class Routing(_Section):
    """Capability routing (gatekeeper.core.route_choice, which reads it as RoutingRules): send a request
    where its tools can be used."""

    escalate_effort: bool = True  # raise the effort of the same model when that admits the tools
    economize_effort: bool = False  # lower it when a cheaper measured effort admits them as well
    # Shell-style pattern of the asked model -> other models, tried in order (the first matching
    # pattern decides).
    fallback: dict[str, list[Annotated[str, Field(min_length=1)]]] = Field(default_factory=dict)
    max_effort: RankedEffort | None = None  # never route to a ranked effort above this one

    @field_validator("fallback")
    @classmethod
    def _some_models(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        for pattern, models in value.items():
            if not models:
                raise ValueError(f"{pattern!r}: expected a list of model names to try, got an empty list")
            for model in models:
                name, at, effort = model.rpartition("@")
                if at and effort in EFFORTS:  # a fallback is tried at its cheapest effort that admits the tools
                    raise ValueError(
                        f"{pattern!r}: {model!r}: expected a model name, not model@effort (write {name!r})"
                    )
        return value


class BenchSettings(_Section):
    """How measurements are made (by `bench` and by the proxy's lazy path)."""

    concurrency: int = Field(default=8, ge=1)
    temperature: float | None = Field(default=0.0, ge=0)
    max_tokens: int | None = Field(default=512, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    # A call is bounded by what its test needs: the test's answer tokens (`maxTokens`, else its
    # category's), and the seconds those take at this rate plus 30 s for the prompt; an answer
    # past either is a failed answer. 2 tokens/s: a small model on two busy cores makes ~2-20.
    min_tokens_per_s: float = Field(default=2.0, gt=0)
    # A call that fails (HTTP 5xx/429, a timeout, a dropped connection) is asked again; past the
    # retries the measurement fails and stores nothing (a broken backend never reads as a weak
    # model). 6: a level makes up to 200 x 23 calls, and at a 10% transient error rate 3 retries
    # give up on 1 call in 10^4 (one measurement in ten lost), 6 on 1 in 10^7.
    max_retries: int = Field(default=6, ge=0)
    system_prompt: str | None = None
    # After a level's tier is certified, measure its tool budget (toolBudget: the largest number of
    # offered tools it chooses among at its tier's toolCalling threshold; gatekeeper.measuring.budget).
    # Pinned pairs are skipped. Costs calls (about 30 a rung for a large model; docs/benchmark.md).
    tool_budget: bool = True
    # A level's budget: each category spends at most this many runs of all its tests' calls; a
    # level stops as soon as its tier is settled. The tier is certified on lower bounds at level
    # `risk` (gatekeeper/measuring/confidence.py; docs/statistics.md has the power and the cost
    # in calls of the default).
    samples: int = Field(default=DEFAULT_SAMPLES, ge=1, le=500)
    # How observations are made: `adaptive` chooses per category and per round between tests
    # drawn by weight and the whole category, and stops each category once it is settled
    # (measuring/design.py: about 112 calls for a model passing every check); `whole` runs every
    # test of the suite in every round (about 830), and stays valid when a backend's failures
    # come in streaks shorter than a round; `spaced` chooses as adaptive does, one observation per
    # category a round, rounds at least `spacing_s` apart, and stays valid for failures in streaks
    # shorter than that time: for a backend whose quality drifts (docs/statistics.md).
    design: Literal["adaptive", "whole", "spaced"] = "adaptive"
    spacing_s: float = Field(default=30.0, ge=0)
    # The most P(stored tier > true tier) may be, for every model (and the level of scoreIntervals).
    # 1 decides on the point estimates (the seed's rule, one sample settles): no guarantee at all.
    risk: float = Field(default=DEFAULT_RISK, gt=0, le=1)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    # After a failed lazy measurement, wait this long (doubling up to retry_max_s) before the next.
    retry_after_s: float = Field(default=30.0, ge=0)
    retry_max_s: float = Field(default=900.0, ge=0)

    @field_validator("thresholds")
    @classmethod
    def _known_categories(cls, value: Thresholds) -> Thresholds:
        for tier, needs in (("large", value.large), ("medium", value.medium)):
            unknown = set(needs) - set(CATEGORIES)
            if unknown:
                raise ValueError(f"{tier}: unknown categories {sorted(unknown)} (expected {list(CATEGORIES)})")
        return value


class LazyMeasurements(_Section):
    """Limits on what clients can trigger by naming models (the lazy path; `bench` ignores them).

    A client without credentials picks model names: without these, distinct names cost the
    operator a measurement each and a permanent store entry each.
    """

    # Measurements running at once (in the whole cluster with a Redis store); more wait their turn.
    max_concurrent: int = Field(default=2, ge=1)
    # Shell-style model-name patterns that may be measured lazily; others stay unmeasured (fail
    # closed) until an admin measures them. None: any name.
    allow: list[str] | None = None
    # Distinct model names the lazy path may add to the store; past it new names stay unmeasured.
    max_models: int = Field(default=64, ge=0)
    # Distinct model@effort pairs the lazy path may add to the store (each costs a suite run).
    max_pairs: int = Field(default=256, ge=0)
    # A measuring process holds a lease on its pair, renewed every third of this; if it dies, another
    # process takes the measurement over at most this long after its last renewal.
    lease_ttl_s: float = Field(default=30.0, gt=0, le=3600)


# An MCP server's label: a letter, then letters and digits in groups joined by single underscores.
# With no `__` in it and no `_` at its end, a tool's exposed name `<label>__<tool>` splits at its
# first `__` into exactly one label and tool (gatekeeper/mcp/names.py).
_MCP_LABEL = re.compile(r"^[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*$")
_MCP_LABEL_MAX = 24  # leaves 38 of OpenAI's 64 function-name characters to the tool
_ORIGIN = re.compile(r"^https?://[^/\s]+$")


class McpServer(_Section):
    """One MCP server behind the gateway: a `command` (stdio; gatekeeper starts it, restarts it
    with backoff when it dies) or a Streamable HTTP `url` (with `headers`)."""

    command: list[str] | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)  # stdio: added to the SDK's short safe environment
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Every upstream MCP call (initialize, a listing page, a tool call, a health ping) ends by then.
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    # The largest message (a listing page, a result) taken from the server, so what it sends
    # cannot fill our memory: a stdio line past it ends that server's connection
    # (gatekeeper.mcp.stdio); an HTTP answer or event past it fails that request
    # (gatekeeper.mcp.bounded_http).
    max_message_mb: float = Field(default=16.0, gt=0, le=1024)
    # What its resources, resource templates and prompts require when no rule of `mcp.resources`
    # or `mcp.prompts` names them (gatekeeper.mcp.reads). None: shown only to a tier that is
    # shown one of the server's tools (a server whose tools are all hidden is hidden whole).
    default_tier: Tier | None = None

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("expected exactly one of `command` (stdio) or `url` (Streamable HTTP)")
        if self.url is not None and not re.match(r"^https?://[^/]+", self.url):
            raise ValueError(f"url: expected an http(s) URL, got {self.url!r}")
        if self.command is not None and self.headers:
            raise ValueError("headers: only for a `url` server")
        if self.url is not None and self.env:
            raise ValueError("env: only for a `command` server")
        if self.command is not None and not all(part for part in self.command):
            raise ValueError("command: every part must be a non-empty string")
        return self


class McpUriRule(_Section):
    """A rule on the servers' resources and resource templates by URI (gatekeeper.mcp.reads): what
    reading one whose URI matches `uri` requires, beside the rules by name. Every matching rule
    applies (the strictest decides); a rule can only raise what an item requires."""

    # A shell-style pattern matched against the whole URI, in any case, as written and normalised
    # (percent-escapes decoded, `.` and `..` segments resolved, repeated slashes collapsed); a
    # template is matched as written (`repo://{owner}/{repo}/delete`) and so is each URI read through it.
    uri: str = Field(min_length=1)
    server: str | None = None  # the label of the server it applies to; None: every server
    tier: Tier | None = None  # the tier reading it needs
    # The tool whose action reading it performs (`files.write_file`, `<label>.<tool>` as in tool
    # rules, or a bare name): a read needs what a call of that tool needs (its tier under
    # tools.required_tier, tools.requires), at least.
    acts_as: str | None = Field(default=None, min_length=1)
    # true: reading it is an action of its own server: it needs what a call of a tool of that
    # server named as the resource or template (`<label>.<name>`) would need, at least.
    action: bool = False

    @model_validator(mode="after")
    def _says_something(self) -> McpUriRule:
        if self.tier is None and self.acts_as is None and not self.action:
            raise ValueError("expected `tier`, `acts_as` or `action: true` (what a read of it needs)")
        if self.acts_as is not None and self.action:
            raise ValueError("expected one of `acts_as` (another tool) or `action: true` (itself as a tool)")
        return self


class McpSettings(_Section):
    """The MCP gateway at /mcp (served only when `servers` is set)."""

    api_keys: list[str | None] = Field(default_factory=list)
    servers: dict[str, McpServer] = Field(default_factory=dict)
    # Browser origins (`scheme://host[:port]`) allowed to call /mcp; a request with another
    # `Origin` is a 403 (the MCP spec's DNS-rebinding rule). Clients that send none pass.
    allowed_origins: list[str] = Field(default_factory=list)
    # Required tiers of the servers' resources and resource templates, and of their prompts, by
    # `<label>.<name>` (shell-style patterns allowed), as tools are ruled in tools.required_tier;
    # a completion follows the prompt or template it completes (gatekeeper.mcp.reads).
    resources: dict[str, Tier] = Field(default_factory=dict)
    prompts: dict[str, Tier] = Field(default_factory=dict)
    # Rules on resources and resource templates by URI (McpUriRule): a read that acts (a template
    # whose read deletes, sends, writes) needs at least what the tool doing the same needs.
    resource_uris: list[McpUriRule] = Field(default_factory=list)

    @field_validator("servers")
    @classmethod
    def _labels(cls, value: dict[str, McpServer]) -> dict[str, McpServer]:
        for label in value:
            if not _MCP_LABEL.fullmatch(label) or len(label) > _MCP_LABEL_MAX:
                raise ValueError(
                    f"{label!r}: a label is a letter, then letters and digits joined by single "
                    f"underscores, at most {_MCP_LABEL_MAX} characters (e.g. files, github_enterprise)"
                )
        return value

    @field_validator("resources", "prompts")
    @classmethod
    def _scoped(cls, value: dict[str, Tier]) -> dict[str, Tier]:
        for rule in value:
            if "." not in rule and rule != "*":
                raise ValueError(f"{rule!r}: expected <label>.<name> (shell-style patterns allowed; '*' for all)")
        return value

    @model_validator(mode="after")
    def _uri_servers(self) -> McpSettings:
        for i, rule in enumerate(self.resource_uris):
            if rule.server is not None and rule.server not in self.servers:
                raise ValueError(f"resource_uris[{i}].server: {rule.server!r} is not one of mcp.servers")
        return self

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not _ORIGIN.match(origin):
                raise ValueError(f"{origin!r}: expected scheme://host[:port], with no path")
        return [origin.lower() for origin in value]

    @model_validator(mode="after")
    def _keys(self) -> McpSettings:
        for i, key in enumerate(self.api_keys):
            if key is None or not key.strip():
                raise ValueError(f"api_keys[{i}]: empty or blank; every key must be a real secret")
        if self.servers and not self.api_keys:
            raise ValueError("api_keys: required when servers are set (the endpoint is a door to tools that run)")
        return self

    @property
    def keys(self) -> list[str]:
        return [key for key in self.api_keys if key]


class Settings(_Section):
    """Everything gatekeeper needs; `Settings()` alone is a working local set-up."""

    upstream: Upstream = Field(default_factory=Upstream)
    models: list[ModelRoute] = Field(default_factory=list)
    suite: Path = DEFAULT_SUITE_DIR
    store: Path | str = Path("models_profile.json")  # a path, or redis://[:password@]host:port/db
    unknown_models: Literal["fail_closed", "wait", "reject"] = "fail_closed"
    unknown_tier: Tier = Tier.SMALL
    wait_timeout_s: float = Field(default=120.0, ge=0)
    tools: ToolRules = Field(default_factory=ToolRules)
    # `"m": medium`, or `"m": {tier: medium, tool_budget: 16}` (Pin).
    pins: dict[str, Tier | Pin] = Field(default_factory=dict)
    admin_key: str | None = None
    # Behind a reverse proxy: the header it sets with the client's address (X-Forwarded-For,
    # X-Real-IP) and how many proxies in front of gatekeeper append to it; the client is that
    # many entries from the right. None: the socket peer's address (what wrong admin keys are
    # counted by; server/throttle.py).
    trusted_proxy_header: str | None = Field(default=None, pattern=r"^[A-Za-z0-9-]{1,64}$")
    trusted_proxy_hops: int = Field(default=1, ge=1, le=16)
    # The peers whose header is believed (addresses or CIDR blocks): a client that reaches
    # gatekeeper directly cannot name itself a new address per request.
    trusted_proxies: list[str] = Field(default_factory=lambda: ["127.0.0.0/8", "::1/128"])
    # Efforts a request may name besides the protocols' own levels (store/profile.py EFFORTS):
    # a closed set, so effort names cannot mint measurements.
    extra_efforts: list[str] = Field(default_factory=list)
    bench: BenchSettings = Field(default_factory=BenchSettings)
    lazy: LazyMeasurements = Field(default_factory=LazyMeasurements)
    drift: DriftSettings = Field(default_factory=DriftSettings)
    routing: Routing | None = None  # absent: no routing, tools above the asked pair are hidden
    mcp: McpSettings = Field(default_factory=McpSettings)
    # What takes the place of a call removed from an answer: `explain`, a short assistant text
    # naming the tool and the tier it needs (the default, also for a config without the key: an
    # answer emptied by enforcement makes agent frameworks raise, and the text names only what
    # the model itself called); `strip`, nothing (round 2's behaviour).
    blocked_calls: Literal["explain", "strip"] = "explain"
    # Per-client policy: a client (named by its credential's SHA-256 or the trusted
    # drift.client_header) may have its own allow/deny lists, tier ceiling and argument rules;
    # the stricter of those and the global ones applies (gatekeeper.rules.clients).
    clients: dict[str, ClientRules] = Field(default_factory=dict)
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    def mcp_bindings(self) -> ServerBindings:
        """Which MCP server each label the config names is (gatekeeper.rules.mcp_identity):
        `tools.mcp_servers`, and the gateway's own `mcp.servers`, whose labels are the operator's
        too: a `url` server is bound to its URL, a `command` one to nothing a request can offer (a
        request's server may not take its label)."""
        servers: dict[str, dict[str, list[str]]] = {
            label: server.model_dump() for label, server in self.tools.mcp_servers.items()
        }
        for label, gateway in self.mcp.servers.items():
            urls = servers.setdefault(label, {}).setdefault("urls", [])
            if gateway.url is not None and gateway.url not in urls:
                urls.append(gateway.url)
        return ServerBindings.of(servers)

    @model_validator(mode="after")
    def _routing_for_budget(self) -> Settings:
        if self.tools.budget == "route" and self.routing is None:
            raise ValueError(
                "tools.budget: 'route' sends a request over its pair's budget to another pair by capability "
                "routing; add a routing: section (e.g. routing.fallback), or choose trim, refuse or report"
            )
        return self

    @model_validator(mode="after")
    def _one_owner_per_mcp_url(self) -> Settings:
        try:
            self.mcp_bindings()
        except ValueError as exc:  # a gateway server's URL bound to another label in tools.mcp_servers
            raise ValueError(f"tools.mcp_servers / mcp.servers: {exc}") from None
        return self

    @field_validator("clients")
    @classmethod
    def _client_names(cls, value: dict[str, ClientRules]) -> dict[str, ClientRules]:
        seen: dict[tuple[str, str], str] = {}
        for name, rules in value.items():
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
                raise ValueError(f"{clip(name)!r}: a client's name is 1-64 letters, digits, '_', '-' or '.'")
            match = rules.match
            key = ("credential", match.credential_sha256) if match.credential_sha256 else ("header", str(match.header))
            if key in seen:
                raise ValueError(f"{name}: matches the same client as {seen[key]}")
            seen[key] = name
        return value

    @model_validator(mode="after")
    def _header_clients(self) -> Settings:
        # The drift identity reads the client header when one is set, else the credential: a
        # match of the other kind would never apply (a client silently under the global rules).
        by_header = self.drift.client_header is not None
        for name, rules in self.clients.items():
            if rules.match.header is not None and not by_header:
                raise ValueError(f"clients.{name}: a match by header needs drift.client_header (the trusted proxy's)")
            if rules.match.credential_sha256 is not None and by_header:
                raise ValueError(
                    f"clients.{name}: with drift.client_header set, clients are named by that header: match by header"
                )
        return self

    @field_validator("admin_key")
    @classmethod
    def _real_key(cls, value: str | None) -> str | None:
        # Empty is what `${GATEKEEPER_ADMIN_KEY:-}` gives when the variable is unset: no admin API.
        # Whitespace is a mistake that would make `Bearer   ` a password: refused.
        if value is not None and value and not value.strip():
            raise ValueError("blank (whitespace only); set a real key, or leave it empty to disable the admin API")
        return value or None

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(f"{entry!r}: expected an IP address or a CIDR block such as 10.0.0.0/8") from None
        return value

    @field_validator("extra_efforts")
    @classmethod
    def _effort_names(cls, value: list[str]) -> list[str]:
        for effort in value:
            if not EFFORT_NAME.match(effort):
                raise ValueError(f"{effort!r}: an effort is 1-32 letters, digits, '_', '-' or '.'")
        return value

    @field_validator("store", mode="before")
    @classmethod
    def _store_location(cls, value: Any) -> Path | str:
        return checked_location(value)  # a URL of a store's scheme (store/schemes.py), else a path

    @field_validator("pins")
    @classmethod
    def _pin_keys(cls, value: dict[str, Tier | Pin]) -> dict[str, Tier | Pin]:
        for key in value:
            model, sep, effort = key.rpartition("@")
            if sep and (not model or not effort):
                raise ValueError(f"{key!r}: expected MODEL, MODEL@EFFORT or MODEL@* (split on the last '@')")
        return value

    @model_validator(mode="after")
    def _pin_efforts(self) -> Settings:
        # `claude-x@20240620: small` reads as model `claude-x` at effort `20240620`, which no
        # request can name: the pin would never apply, and the model it meant would be measured
        # instead (perhaps higher). An effort a pin names must be one a request can carry.
        efforts = EFFORTS | set(self.extra_efforts)
        for key in self.pins:
            model, sep, effort = key.rpartition("@")
            if sep and effort != "*" and effort not in efforts:
                raise ValueError(
                    f"pins: {key!r} pins model {model!r} at effort {effort!r}, which is not an effort "
                    f"(one of {sorted(efforts)}, or '*'); to pin the model {key!r} itself write '{key}@*'"
                )
        return self

    def model_route(self, model: str) -> ModelRoute | None:
        """The `models:` entry that calls `model` through litellm (None: the upstream serves it).
        Not capability routing (`routing:`, core/router.py), which picks the pair a request uses."""
        return next((r for r in self.models if r.name == model), None)

    def pin_for(self, model: str, effort: str) -> Tier | None:
        """The tier of the admin's pin for the pair (`pin_entry`), None when it has none."""
        pinned = self.pin_entry(model, effort)
        return None if pinned is None else pinned.tier

    def pin_entry(self, model: str, effort: str) -> Pin | None:
        """The admin's pin for the pair: `MODEL@EFFORT` first, then every effort of the model.

        A pin key splits on its last `@`, like a profile key: `m@low` pins model `m` at `low` and
        never a model literally named `m@low`, which is pinned at every effort as `m@low@*`.
        """
        pinned = self.pins.get(f"{model}@{effort}") or self.pins.get(f"{model}@*")
        if pinned is None and "@" not in model:
            pinned = self.pins.get(model)
        if pinned is None:
            return None
        return pinned if isinstance(pinned, Pin) else Pin(tier=pinned)


def _expand(value: Any, where: str) -> Any:
    """Replace ${VAR} (or ${VAR:-default}) from the environment; an unset VAR is an error."""
    if isinstance(value, dict):
        return {k: _expand(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name: str = match.group(1)
        default: str | None = match.group(2)
        if name in os.environ:
            return os.environ[name]
        if default is not None:
            return str(default)
        raise ConfigError(f"{where}: environment variable {name} is not set (use ${{{name}:-}} to allow empty)")

    expanded = _VAR.sub(substitute, value)
    return None if expanded == "" and value != "" else expanded


def load_settings(path: str | Path) -> Settings:
    """Read and validate a config file; relative paths in it are relative to the file."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError.in_file(path, f"cannot read: {exc.strerror or type(exc).__name__}") from None
    except yaml.YAMLError as exc:
        raise ConfigError.in_file(path, f"not valid YAML: {_yaml_problem(exc)}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError.in_file(path, f"expected a mapping at the top level, got {type(raw).__name__}")
    try:
        settings = Settings.model_validate(_expand(raw, ""))
    except ConfigError as exc:
        raise ConfigError.in_file(path, str(exc)) from None
    except ValidationError as exc:
        raise ConfigError.in_file(path, describe_errors(exc)) from None
    base = path.resolve().parent
    updates = {
        key: base / value
        for key in ("suite", "store")
        if key in raw and isinstance(value := getattr(settings, key), Path) and not value.is_absolute()
    }
    return settings.model_copy(update=updates)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """Where the YAML breaks and how, without the lines PyYAML quotes (a config's line may hold
    a key, and this message reaches the admin API and the log)."""
    mark = getattr(exc, "problem_mark", None)
    said = [getattr(exc, "context", None), getattr(exc, "problem", None)]
    what = ", ".join(part for part in said if part) or type(exc).__name__
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what


def describe_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = err["loc"]
        # pydantic marks an error in a dict's key by `[key]` right after that key, which is also the
        # error's input (`requires.1.[key]`: the key 1 is not a string); the marker is dropped, a
        # key that is literally "[key]" (`required_tier.[key]`: its value is bad) is kept.
        if len(loc) >= 2 and loc[-1] == "[key]" and loc[-2] == err.get("input"):
            loc = loc[:-1]
        where = ".".join(str(p) for p in loc)
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        if err["type"] in ("literal_error", "enum") and isinstance(err["input"], str):
            msg += f", got {clip(err['input'])!r}"  # a choice's value: never a secret, so it may be shown
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)
