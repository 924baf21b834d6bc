"""Which tier may list and read what the gateway's servers offer besides tools: resources,
resource templates, prompts, and the completions of the last two. Pure.

Each one has a required tier, found in order:

- a rule naming it as `<label>.<name>` (its server's label, its own `name`; shell-style
  patterns, exact names first, then patterns in config order): `mcp.resources` for resources
  and resource templates, `mcp.prompts` for prompts;
- else its server's `mcp.servers.<label>.default_tier`;
- else its server's tools decide: it is shown to a tier that is shown at least one of them. A
  server whose tools are all hidden (or that has none) is hidden whole: its resources would
  otherwise be a way round its tools' rules (a secret in a resource, a template whose read acts).

A name outside printable ASCII gets the strictest rule there is, or its default when that is
stricter: rules are written in ASCII, and a lookalike must not take a looser one's place.
A completion is judged as the prompt or resource template it completes (gatekeeper.mcp.gateway).

Resources and resource templates are also ruled by URI (`mcp.resource_uris`), on top of the
above: every rule whose pattern matches one of the item's URIs (a resource's, a template as
written, a read's URI and the templates it was routed by) must admit the tier too. A rule sets a
`tier`, or says the read is an action: `acts_as: <tool>` (it does what that tool does: it needs
what a call of that tool needs) or `action: true` (it is a tool of its own server, named as the
item: `<label>.<name>` under the tool rules). URI rules only ever raise a requirement, so a URI
is matched in every form a server might read it as (as written and normalised, in any case), and
one outside printable ASCII meets every rule of its server.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal
from urllib.parse import unquote

from gatekeeper.rules.tiers import Tier

Kind = Literal["resource", "prompt"]  # a resource template is ruled as a resource
_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class Verdict:
    """What a tier may do with one item: `allowed`, and why (the rule or default that decided)."""

    allowed: bool
    required: Tier | None  # None: decided by the server's tools (none shown at this tier)
    why: str


@dataclass(frozen=True)
class UriRule:
    """One `mcp.resource_uris` entry: a URI pattern (on `server`, or every server when None) and
    what a read of a matching item needs: `tier`, and/or the tool it `acts_as` ("" with
    `action: true`: the item itself, as a tool of its server)."""

    pattern: str
    server: str | None = None
    tier: Tier | None = None
    acts_as: str | None = None


# A tool's rule name (`files.write_file`, `delete_repo`) -> (admitted at the request's tier, the
# tier it needs): what the gateway's tool policy says of a call of it.
ToolJudge = Callable[[str], tuple[bool, Tier]]


class ReadRules:
    """The rules of one settings version (`mcp.resources`, `mcp.prompts`, `mcp.resource_uris`,
    the servers' defaults)."""

    def __init__(
        self,
        resources: Mapping[str, Tier],
        prompts: Mapping[str, Tier],
        defaults: Mapping[str, Tier | None],
        uris: Sequence[UriRule] = (),
    ) -> None:
        self._rules = {"resource": dict(resources), "prompt": dict(prompts)}
        self._defaults = dict(defaults)
        self._uris = tuple(uris)

    def judge(
        self,
        tier: Tier,
        kind: Kind,
        label: str,
        name: str | None,
        tools_shown: bool,
        uris: Sequence[str] = (),
        tool: ToolJudge | None = None,
    ) -> Verdict:
        """May `tier` list or read the `kind` called `name` (None: a resource known only by the
        URI a tool result linked to) of server `label`, whose tools `tools_shown` to it or not?
        A resource or template is also judged by the URI rules matching any of its `uris`
        (`tool` judges the tools they name; without it such a rule refuses)."""
        verdict = self._by_name(tier, kind, label, name, tools_shown)
        if kind != "resource" or not verdict.allowed:
            return verdict
        for rule in self._matching(label, uris):
            if rule.tier is not None and not tier.allows(rule.tier):
                why = f"the rule for URI {rule.pattern!r} (mcp.resource_uris) needs tier {rule.tier.value}"
                return Verdict(False, rule.tier, why)
            if rule.acts_as is not None:
                acted = rule.acts_as or f"{label}.{name}"
                allowed, needs = tool(acted) if tool is not None else (False, Tier.LARGE)
                if not allowed:
                    why = (
                        f"reading it acts as the tool {acted!r} (mcp.resource_uris {rule.pattern!r}), "
                        f"which this model may not call (it needs tier {needs.value})"
                    )
                    return Verdict(False, needs, why)
        return verdict

    def _matching(self, label: str, uris: Sequence[str]) -> list[UriRule]:
        rules = [r for r in self._uris if r.server is None or r.server == label]
        if not rules or not uris:
            return []
        forms = {form for uri in uris for form in uri_forms(uri)}
        if not all(form.isascii() and form.isprintable() for form in forms):
            return rules  # a lookalike or a control character: every rule of its server
        lowered = {form.lower() for form in forms}
        return [r for r in rules if any(fnmatchcase(form, r.pattern.lower()) for form in lowered)]

    def _by_name(self, tier: Tier, kind: Kind, label: str, name: str | None, tools_shown: bool) -> Verdict:
        rules = self._rules[kind]
        ruled = f"{label}.{name}" if name is not None else None
        found = _match(rules, ruled) if ruled is not None else None
        default = self._defaults.get(label)
        if ruled is not None and not (ruled.isascii() and ruled.isprintable()):
            found = max((t for t in (found, *rules.values(), default) if t is not None), key=_rank, default=None)
        if found is not None:
            return Verdict(tier.allows(found), found, f"the rule for {ruled!r} (mcp.{kind}s) needs tier {found.value}")
        if default is not None:
            why = f"server {label!r} needs tier {default.value} (mcp.servers.{label}.default_tier)"
            return Verdict(tier.allows(default), default, why)
        why = (
            f"server {label!r} shows tier {tier.value} none of its tools, and no rule (mcp.{kind}s) or "
            f"mcp.servers.{label}.default_tier says otherwise"
        )
        return Verdict(tools_shown, None, why)


_DECODE_ROUNDS = 3  # `%252e` is `%2e` once decoded, `.` twice: a server may decode more than once
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*:)(//[^/?#]*)?(.*)$", re.DOTALL)


def uri_forms(uri: str) -> set[str]:
    """`uri` in the forms a server might read it as: as written, its percent-escapes decoded (up
    to three times), and each with `.`/`..` segments resolved and repeated slashes collapsed, so
    `file:///tmp/../etc/x`, `file:///%65tc/x` and `file:////etc//x` all meet a rule on
    `file:///etc/*`."""
    forms = {uri}
    decoded = uri
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote(decoded)
        forms.add(decoded)
    for form in list(forms):
        found = _SCHEME.match(form)
        if found is None:
            continue
        scheme, authority, rest = found.group(1), found.group(2) or "", found.group(3)
        path, tail = _split_query(rest)
        if not path:
            continue
        resolved = _resolved(path)
        forms.add(f"{scheme}{authority}{resolved}{tail}")
        if not authority and path.startswith("/"):  # `file:/etc/x` and `file:///etc/x` are one file
            forms.add(f"{scheme}//{resolved}{tail}")
    return forms


def _split_query(rest: str) -> tuple[str, str]:
    """A URI's path, and its query and fragment (with their `?` / `#`)."""
    found = re.search(r"[?#]", rest)
    return (rest, "") if found is None else (rest[: found.start()], rest[found.start() :])


def _resolved(path: str) -> str:
    """`path` with repeated slashes collapsed and `.`/`..` segments resolved (RFC 3986 5.2.4)."""
    resolved = posixpath.normpath(re.sub(r"/{2,}", "/", path))
    if resolved == ".":
        resolved = ""
    if path.startswith("/") and not resolved.startswith("/"):
        resolved = "/" + resolved
    if path.endswith("/") and not resolved.endswith("/"):
        resolved += "/"
    return resolved


def _match(rules: Mapping[str, Tier], name: str) -> Tier | None:
    exact = rules.get(name)
    if exact is not None:
        return exact
    return next(
        (t for pattern, t in rules.items() if _WILDCARDS & set(pattern) and fnmatchcase(name, pattern)),
        None,
    )


def _rank(tier: Tier) -> int:
    return tier.rank
