"""Which tools a tier may see: typed tool identity (ToolKind, ToolId), the one table of built-in
tool types (BUILTIN_FAMILIES), and the tier rules (ToolPolicy). Pure: no I/O."""

from __future__ import annotations

import enum
import threading
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from gatekeeper.rules import arguments as A
from gatekeeper.rules.mcp_identity import ServerBindings
from gatekeeper.rules.tiers import Tier


class ToolKind(enum.Enum):
    """What kind of thing a tool name names. Two tools of different kinds never match, whatever
    their names: a function named `computer_notes` is not the `computer` built-in."""

    FUNCTION = "function"  # a client function tool (chat `function`, Responses `function`, Messages custom tool)
    CUSTOM = "custom"  # an OpenAI free-form `custom` tool (grammar or text input)
    BUILTIN = "builtin"  # a tool of a protocol-defined type, named by that versioned type
    MCP = "mcp"  # one tool of an MCP server: `server.tool`
    NAMESPACED = "namespaced"  # one function of a Responses `namespace` tool group: `namespace.function`


@dataclass(frozen=True, slots=True)
class ToolId:
    """The exact, typed identity of one tool (hashable; the key that request gating and answer
    enforcement agree on).

    `name` by kind:
      * FUNCTION / CUSTOM: the tool's own name (`read_file`);
      * BUILTIN: the versioned type the protocol spells (`web_search_2025_08_26`,
        `computer_20250124`, `bash_20250124`, `local_shell`), never a `name` the client put on
        it; `builtin_family(name)` gives the family a rule may name (`web_search`);
      * MCP: `server.tool` (server labels never contain a dot, so the split is unique);
        `server.*` stands for every tool of a server that was offered whole, which happens
        only when no rule above the tier names a tool of that server;
      * NAMESPACED: `namespace.function` (namespace names never contain a dot).

    Build them with the constructors (`ToolId.function("read_file")`, `ToolId.builtin(type)`,
    `ToolId.mcp("github", "delete_repo")`, `ToolId.namespaced("ns", "fn")`); `str()` is the name
    as logs and `tools.required_tier` rules spell it.
    """

    kind: ToolKind
    name: str

    @classmethod
    def function(cls, name: str) -> ToolId:
        return cls(ToolKind.FUNCTION, name)

    @classmethod
    def custom(cls, name: str) -> ToolId:
        return cls(ToolKind.CUSTOM, name)

    @classmethod
    def builtin(cls, versioned_type: str) -> ToolId:
        return cls(ToolKind.BUILTIN, versioned_type)

    @classmethod
    def mcp(cls, server: str, tool: str) -> ToolId:
        return cls(ToolKind.MCP, f"{server}.{tool}")

    @classmethod
    def namespaced(cls, namespace: str, function: str) -> ToolId:
        return cls(ToolKind.NAMESPACED, f"{namespace}.{function}")

    @property
    def group(self) -> str | None:
        """The MCP server or namespace an MCP / NAMESPACED tool belongs to (else None)."""
        if self.kind in (ToolKind.MCP, ToolKind.NAMESPACED):
            return self.name.partition(".")[0]
        return None

    def __str__(self) -> str:
        return self.name


# Every built-in tool type the codecs know (OpenAI Responses, Anthropic Messages incl. beta) ->
# the family name a `tools.required_tier` rule may use for all its versions. The one table of
# families: a rule `web_search: large` hides every type listed under `web_search`. A type missing
# here is not a built-in gatekeeper knows, and the codecs refuse it (tests/protocols compare this
# table with the installed SDKs' tool types).
BUILTIN_FAMILIES: dict[str, str] = {
    # OpenAI Responses (openai/types/responses/tool_param.py)
    "web_search": "web_search",
    "web_search_2025_08_26": "web_search",
    "web_search_preview": "web_search",
    "web_search_preview_2025_03_11": "web_search",
    "file_search": "file_search",
    "computer": "computer",
    "computer_use_preview": "computer",
    "computer_use": "computer",  # a tool_choice type (openai ToolChoiceTypesParam)
    "code_interpreter": "code_interpreter",
    "programmatic_tool_calling": "programmatic_tool_calling",
    "image_generation": "image_generation",
    "local_shell": "shell",
    "shell": "shell",
    "apply_patch": "apply_patch",
    "tool_search": "tool_search",
    # Anthropic Messages (anthropic/types/tool_union_param.py, beta/beta_tool_union_param.py)
    "bash_20241022": "bash",
    "bash_20250124": "bash",
    "code_execution_20250522": "code_execution",
    "code_execution_20250825": "code_execution",
    "code_execution_20260120": "code_execution",
    "code_execution_20260521": "code_execution",
    "computer_20241022": "computer",
    "computer_20250124": "computer",
    "computer_20251124": "computer",
    "computer_toolset_20260801": "computer",
    "browser_toolset_20260801": "browser",
    "memory_20250818": "memory",
    "text_editor_20241022": "text_editor",
    "text_editor_20250124": "text_editor",
    "text_editor_20250429": "text_editor",
    "text_editor_20250728": "text_editor",
    "web_search_20250305": "web_search",
    "web_search_20260209": "web_search",
    "web_search_20260318": "web_search",
    "web_fetch_20250910": "web_fetch",
    "web_fetch_20260209": "web_fetch",
    "web_fetch_20260309": "web_fetch",
    "web_fetch_20260318": "web_fetch",
    "tool_search_tool_bm25": "tool_search",
    "tool_search_tool_bm25_20251119": "tool_search",
    "tool_search_tool_regex": "tool_search",
    "tool_search_tool_regex_20251119": "tool_search",
    "advisor_20260301": "advisor",
}


def builtin_family(versioned_type: str) -> str | None:
    """The family of a built-in tool type (`web_search_2025_08_26` -> `web_search`); None when
    the type is not a built-in gatekeeper knows."""
    return BUILTIN_FAMILIES.get(versioned_type)


_WILDCARDS = "*?["
# Memos keyed by names (a client's, or an upstream's in an answer) keep only names up to this
# long: a bounded count of entries is not bounded memory when each key may be megabytes.
MEMO_NAME_LIMIT = 256
MEMO_SIZE = 100_000
_BY_NAME = (ToolKind.FUNCTION, ToolKind.CUSTOM)  # kinds whose rules are looked up by their name alone


class ToolPolicy:
    """Required tier per tool: exact rule names first, then shell-style patterns in config order.

    A plain name (str) is looked up as written. A `ToolId` is looked up by every name that
    covers it, and the highest tier found wins (fail closed):
      * FUNCTION / CUSTOM: its name;
      * BUILTIN: its versioned type and its family (`web_search_2025_08_26`, `web_search`);
      * MCP / NAMESPACED: its group (`github`, which gates the whole server), `group.tool`
        (`github.delete_repo`, matched by `github.delete_*`) and the bare tool name
        (`delete_repo`: a rule for a function is not escaped by wrapping it in a namespace);
        and, for an MCP server no server-scoped rule names and `servers` does not bind (a label
        the client chose, `gh`), every server-scoped rule whose tool part matches the tool
        (`github.delete_*` for `gh.delete_repo`) and the whole-server rule of every named group:
        it may be any server (gatekeeper.rules.mcp_identity). Not for a namespace: its functions are
        the client's own, which it could as well offer bare (where only bare-name rules reach).
    A name no rule matches requires `default_tier`.

    `arguments` (`tools.arguments`, gatekeeper.rules.arguments) makes a call's requirement depend
    on its arguments: `required_tier` is then the lowest tier some call of the tool needs (where
    it is offered), `own_tier` the requirement of a call no entry matches, and `call_tier` what one
    call needs. Argument rules reach a tool by the same names as `covering_names`.
    """

    def __init__(
        self,
        required_tier: dict[str, Tier] | None = None,
        default_tier: Tier = Tier.SMALL,
        unknown_fields: str = "refuse",
        servers: ServerBindings | None = None,
        also_naming: Iterable[str] = (),
        arguments: Mapping[str, Sequence[A.ArgumentRule]] | None = None,
    ) -> None:
        rules = required_tier or {}
        self.arguments = A.ArgumentRules(arguments)
        self.default_tier = default_tier
        # What a codec does with a request field it does not know: "refuse" (400) or "drop".
        self.unknown_fields = unknown_fields
        # Which MCP server a request's server entry is (tools.mcp_servers), read by RequestGate.
        self.servers = servers or ServerBindings()
        self._exact = {k: v for k, v in rules.items() if not any(c in k for c in _WILDCARDS)}
        self._patterns = [(k, v) for k, v in rules.items() if k not in self._exact]
        # The same rules over folded names (fold_name): a name that only looks like a rule's
        # name gets that rule too, when it is higher. Two rules that fold alike: the higher one.
        self._folded_exact: dict[str, Tier] = {}
        for rule, tier in self._exact.items():
            known = self._folded_exact.get(fold_name(rule))
            if known is None or tier.rank > known.rank:
                self._folded_exact[fold_name(rule)] = tier
        self._folded_patterns = [(fold_name(k), v) for k, v in self._patterns]
        # What a name outside ASCII gets unless a rule names it as written (_rule).
        self._strictest = max([*rules.values(), default_tier], key=lambda t: t.rank) if rules else None
        # Groups the rules name (the literal server part of `github.delete_*`; also those of
        # `also_naming`, the tools.requires rules) or the config binds: their labels are taken at
        # their word. Any other group may be any of them.
        scoped = [(rule.partition("."), tier) for rule, tier in rules.items() if "." in rule]
        self.named_groups = self.servers.labels | named_groups([*rules, *also_naming, *self.arguments.keys()])
        # What a tool of an unnamed group needs: every server-scoped rule by its tool part, and
        # the whole-server rule of every named group (`github: large` hides github's tools
        # whatever the label).
        self._any_group = [(part, tier) for (_, _, part), tier in scoped]
        self._any_group += [("*", t) for g in sorted(self.named_groups) if (t := self._rule(g)) is not None]
        # Names come from clients, so the memo is bounded (emptied when full). A plain dict: a
        # read takes no lock and no Python call (every tool of every request reads it).
        self._memo: dict[str | ToolId, Tier] = {}
        self._memo_lock = threading.Lock()

    def _rule(self, name: str) -> Tier | None:
        """The tier of the first rule that matches `name` (exact, then patterns), or None; and,
        when `name` only looks like a rule's name (another case, a zero-width or control
        character, a compatibility form: `EXECUTE_COMMAND`, `execute_command\u200b`), the higher
        of that and the lookalike's rule. Names stay exact everywhere else (a call of
        `read_file\u200b` is not a call of `read_file`); here the doubt goes to the higher tier."""
        found = self._exact.get(name)
        if found is None:
            found = next((t for pattern, t in self._patterns if fnmatchcase(name, pattern)), None)
        folded = fold_name(name)
        alike = self._folded_exact.get(folded)
        if alike is None:
            alike = next((t for pattern, t in self._folded_patterns if fnmatchcase(folded, pattern)), None)
        if alike is not None and (found is None or alike.rank > found.rank):
            return alike
        return found

    def _tool_rule(self, name: str) -> Tier | None:
        """`_rule` for a tool's own name (not a server's or namespace's label). A name still
        outside ASCII once folded may be a lookalike from another script (a Cyrillic `е` in
        `еxecute_command`) that no table here can tell: unless a rule names it exactly, it gets
        the strictest rule there is (the model APIs refuse such names; local servers may not)."""
        found = self._rule(name)
        strictest = self._strictest
        if strictest is None or name.isascii() or name in self._exact or fold_name(name).isascii():
            return found
        return strictest if found is None or strictest.rank > found.rank else found

    def _lookup(self, tool: str | ToolId) -> Tier:
        if isinstance(tool, str):
            return self._tool_rule(tool) or self.default_tier
        if tool.kind is ToolKind.BUILTIN:
            family = builtin_family(tool.name)
            found = [t for t in (self._tool_rule(tool.name), self._rule(family) if family else None) if t is not None]
            return max(found, key=lambda t: t.rank) if found else self.default_tier
        group = tool.group
        if group is not None:
            # The group's rule (or the default), `group.tool`'s, and the bare tool name's: a rule
            # for `execute_command` is not escaped by offering it inside a namespace or server.
            bare = tool.name.partition(".")[2]
            found = [self._rule(group) or self.default_tier]
            found += [t for t in (self._rule(tool.name), self._tool_rule(bare)) if t is not None]
            if tool.kind is ToolKind.MCP and group not in self.named_groups:  # it may be any server
                folded = fold_name(bare)
                found += [
                    t for part, t in self._any_group if fnmatchcase(bare, part) or fnmatchcase(folded, fold_name(part))
                ]
            return max(found, key=lambda t: t.rank)
        return self._tool_rule(tool.name) or self.default_tier

    def required_tier(self, tool: str | ToolId) -> Tier:
        """The lowest tier that sees `tool`: its own requirement, or lower when an argument rule
        admits some of its calls lower (`call_tier` then judges each call)."""
        if isinstance(tool, ToolId) and tool.kind in _BY_NAME:
            tool = tool.name  # the same lookup as the plain name, and a str hashes fastest
        tier = self._memo.get(tool)
        if tier is None:
            tier = self.lowest_call_tier(tool, self._lookup(tool))
            if len(str(tool)) <= MEMO_NAME_LIMIT:
                with self._memo_lock:
                    if len(self._memo) >= MEMO_SIZE:
                        self._memo.clear()
                    self._memo[tool] = tier
        return tier

    def lowest_call_tier(self, tool: str | ToolId, own: Tier) -> Tier:
        """The lowest tier some call of `tool` needs when a call no argument rule matches needs
        `own`: the lowest of `own` and its entries' tiers (a name that only reads like a rule's
        key: the strictest)."""
        if not self.arguments:
            return own
        entries, doubt = self.argument_entries(tool)
        if doubt is not None:
            return max([A.strictest(entries, own), doubt], key=lambda t: t.rank)
        return A.lowest(entries, own)

    def own_tier(self, tool: str | ToolId) -> Tier:
        """What a call of `tool` needs when no argument rule matches it."""
        return self._lookup(tool.name if isinstance(tool, ToolId) and tool.kind in _BY_NAME else tool)

    def argument_entries(self, tool: str | ToolId) -> tuple[tuple[A.Entry, ...], Tier | None]:
        """The argument rules' entries for `tool`, and the tier of those it only reads like."""
        unnamed = isinstance(tool, ToolId) and tool.kind is ToolKind.MCP and tool.group not in self.named_groups
        # A tool of a server no rule names may be any server's: `github.create_file`'s entries
        # reach `gh.create_file` as a doubt (their strictest tier), never to lower it.
        return self.arguments.entries(covering_names(tool), any_group=unnamed)

    def judges_arguments(self, tool: str | ToolId) -> bool:
        """Does what a call of `tool` needs depend on its arguments (an answer must then hold
        the call until its arguments are complete)?"""
        if not self.arguments:
            return False
        entries, doubt = self.argument_entries(tool)
        return bool(entries) or doubt is not None

    def call_tier(self, tool: str | ToolId, arguments: str | Mapping[str, Any] | None, own: Tier | None = None) -> Tier:
        """The tier one call of `tool` with `arguments` (JSON text or an object) needs; `own`
        overrides the tool's own requirement (a tier given at registration, in process)."""
        own = own if own is not None else self.own_tier(tool)
        if not self.arguments:
            return own
        entries, doubt = self.argument_entries(tool)
        if doubt is not None:
            return max([A.strictest(entries, own), doubt], key=lambda t: t.rank)
        return A.call_tier(entries, own, arguments) if entries else own

    def narrows(self) -> bool:
        """Can `narrowed` narrow any schema (are there argument rules)? A gate asks once a request."""
        return bool(self.arguments)

    def narrowed(self, tier: Tier, tool: str | ToolId, schema: Mapping[str, Any]) -> dict[str, Any] | None:
        """`schema` (the tool's arguments') narrowed to the calls argument rules admit at `tier`,
        when only they admit the tool there and the schema can say it (A.narrowed_schema); None:
        offered as it is."""
        if not self.arguments:
            return None
        entries, doubt = self.argument_entries(tool)
        if doubt is not None or not entries or tier.allows(self.own_tier(tool)):
            return None
        return A.narrowed_schema(schema, [e for e in entries if tier.allows(e.tier)])

    def admits_call(self, tier: Tier, tool: str | ToolId, arguments: str | Mapping[str, Any] | None) -> bool:
        """Is one call of `tool` with `arguments` admitted at `tier` (the tool's rules and its
        arguments' rules)?"""
        return self.allows(tier, tool) and tier.allows(self.call_tier(tool, arguments))

    def allows(self, tier: Tier, tool: str | ToolId) -> bool:
        return tier.allows(self.required_tier(tool))

    def rule_hiding_part_of(self, group: str, tier: Tier) -> str | None:
        """A rule that could hide, at `tier`, some tool of the MCP server or namespace `group`
        (`github.delete_*: large` at small; or a rule without a dot, which names bare tool
        names such as `write_*`), or None when every tool of `group` is admitted whenever the
        group is. Patterns are judged by their literal prefix, so the answer errs towards "some
        tool may be hidden" (which narrows or refuses, never opens)."""
        prefix = f"{group}."
        above = [r for r, required in [*self._exact.items(), *self._patterns] if not tier.allows(required)]
        if group not in self.named_groups:  # it may be any server: a rule for any server's tools counts
            found = next((r for r in above if "." in r or r in self.named_groups), None)
            if found is not None:
                return found
        for rule in above:  # rules that name this group's tools first: they make the clearer message
            literal = rule
            for c in _WILDCARDS:
                literal = literal.split(c, 1)[0]
            if rule.startswith(prefix) or (
                literal != rule and (literal.startswith(prefix) or prefix.startswith(literal))
            ):
                return rule
        return next((r for r in above if "." not in r and r != group), None)


# Characters a tool name may carry that a reader (or a model's tokenizer) does not see: control
# and format characters (NUL, zero-width spaces and joiners, the BOM, bidi marks) and separators.
_INVISIBLE = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


class PolicyOver(ToolPolicy):
    """A policy layered over `base` (the pair's requirements, a client's rules, a trim): every
    question is the base's until a subclass overrides it, so each layer writes only what it adds
    and a layer's layer still answers every question a codec may ask."""

    def __init__(self, base: ToolPolicy) -> None:
        # No super().__init__(): the rules and their memo are the base policy's, shared.
        self.base = base
        self.default_tier, self.unknown_fields = base.default_tier, base.unknown_fields
        self.servers, self.named_groups = base.servers, base.named_groups

    def required_tier(self, tool: str | ToolId) -> Tier:
        return self.base.required_tier(tool)

    def own_tier(self, tool: str | ToolId) -> Tier:
        return self.base.own_tier(tool)

    def argument_entries(self, tool: str | ToolId) -> tuple[tuple[A.Entry, ...], Tier | None]:
        return self.base.argument_entries(tool)

    def judges_arguments(self, tool: str | ToolId) -> bool:
        return self.base.judges_arguments(tool)

    def call_tier(self, tool: str | ToolId, arguments: str | Mapping[str, Any] | None, own: Tier | None = None) -> Tier:
        return self.base.call_tier(tool, arguments, own)

    def lowest_call_tier(self, tool: str | ToolId, own: Tier) -> Tier:
        return self.base.lowest_call_tier(tool, own)

    def narrows(self) -> bool:
        return self.base.narrows()

    def narrowed(self, tier: Tier, tool: str | ToolId, schema: Mapping[str, Any]) -> dict[str, Any] | None:
        return self.base.narrowed(tier, tool, schema)

    def allows(self, tier: Tier, tool: str | ToolId) -> bool:
        return self.base.allows(tier, tool)

    def rule_hiding_part_of(self, group: str, tier: Tier) -> str | None:
        return self.base.rule_hiding_part_of(group, tier)


def fold_name(name: str) -> str:
    """`name` as a lookalike test reads it: compatibility forms folded (NFKC: fullwidth letters,
    ligatures), invisible characters removed, case folded. ASCII names without spaces, the common
    case, only lose their case."""
    if name.isascii() and name.isprintable() and " " not in name:
        return name.lower()
    folded = unicodedata.normalize("NFKC", name)
    return "".join(c for c in folded if unicodedata.category(c) not in _INVISIBLE).casefold()


def covering_names(tool: str | ToolId) -> tuple[str, ...]:
    """Every rule name that covers a tool: a plain name as written; a built-in by its versioned
    type and its family; an MCP or namespaced tool by its group, `group.tool` and its bare name
    (a rule for `delete_repo` is not escaped by offering it inside a server or namespace)."""
    if isinstance(tool, str):
        return (tool,)
    if tool.kind is ToolKind.BUILTIN:
        family = builtin_family(tool.name)
        return (tool.name, family) if family else (tool.name,)
    group = tool.group
    return (group, tool.name, tool.name.partition(".")[2]) if group is not None else (tool.name,)


def named_groups(rules: Iterable[str]) -> frozenset[str]:
    """The MCP servers / namespaces rules name: the literal group part of each `group.tool` rule
    (`github` of `github.delete_*`; none of `git*.push`)."""
    groups = (rule.partition(".")[0] for rule in rules if "." in rule)
    return frozenset(g for g in groups if not any(c in g for c in _WILDCARDS))
