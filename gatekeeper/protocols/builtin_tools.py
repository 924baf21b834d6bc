"""The typed built-in tools of the Responses and Messages APIs, as their requests write them: the
fields each built-in type has (written in schema.py's table language), and the fixed name each
typed Messages tool carries. One table that no protocol package owns: Responses and Messages build
their `tools` tables from it (`RESPONSES_TOOL`, `MESSAGES_TOOL`), and chat takes the same tools
from it (chat's `CHAT_BUILTIN_TOOL`: some chat servers accept them in `tools`), so no protocol
imports another's fields. Which family each type belongs to is rules/tools.py `BUILTIN_FAMILIES`."""

from __future__ import annotations

import re
from collections.abc import Mapping

from gatekeeper.protocols.schema import (
    CACHE_CONTROL,
    FILE_FILTERS,
    FORWARD,
    GATED,
    INPUT_EXAMPLES,
    SCHEMA,
    TYPE_ONLY,
    USER_LOCATION,
    Fields,
    Obj,
    Typed,
)
from gatekeeper.rules.tools import BUILTIN_FAMILIES

# -- Responses (openai types/responses/tool_param.py) ------------------------------------------

_DOMAIN_POLICY = Typed(
    {
        "disabled": TYPE_ONLY,
        "allowlist": {
            "type": FORWARD,
            "allowed_domains": FORWARD,
            "domain_secrets": Obj({"domain": FORWARD, "name": FORWARD, "value": FORWARD}),
        },
    }
)
_CONTAINER_AUTO: Fields = {
    "type": FORWARD,
    "file_ids": FORWARD,
    "memory_limit": FORWARD,
    "network_policy": _DOMAIN_POLICY,
}
_SKILLS = Typed(
    {
        "skill_reference": {"type": FORWARD, "skill_id": FORWARD, "version": FORWARD},
        "inline": {
            "type": FORWARD,
            "name": FORWARD,
            "description": FORWARD,
            "source": Typed({"base64": {"type": FORWARD, "data": FORWARD, "media_type": FORWARD}}),
        },
    }
)
_LOCAL_ENVIRONMENT: Fields = {
    "type": FORWARD,
    "skills": Obj({"name": FORWARD, "description": FORWARD, "path": FORWARD}),
}
_CONTAINER_REFERENCE: Fields = {"type": FORWARD, "container_id": FORWARD}
RESPONSES_SHELL_ENVIRONMENT = Typed(  # also an earlier shell_call's `environment`
    {
        "container_auto": {**_CONTAINER_AUTO, "skills": _SKILLS},
        "local": _LOCAL_ENVIRONMENT,
        "container_reference": _CONTAINER_REFERENCE,
    }
)
_WEB_SEARCH: Fields = {
    "type": GATED,
    "external_web_access": FORWARD,
    "filters": Obj({"allowed_domains": FORWARD}),
    "search_context_size": FORWARD,
    "user_location": USER_LOCATION,
}
_WEB_SEARCH_PREVIEW: Fields = {
    "type": GATED,
    "search_content_types": FORWARD,
    "search_context_size": FORWARD,
    "user_location": USER_LOCATION,
}
RESPONSES_BUILTIN_TOOLS: Mapping[str, Fields] = {  # by type; they have no `name`: a name is unknown
    "web_search": _WEB_SEARCH,
    "web_search_2025_08_26": _WEB_SEARCH,
    "web_search_preview": _WEB_SEARCH_PREVIEW,
    "web_search_preview_2025_03_11": _WEB_SEARCH_PREVIEW,
    "file_search": {
        "type": GATED,
        "vector_store_ids": FORWARD,
        "filters": FILE_FILTERS,
        "max_num_results": FORWARD,
        "ranking_options": Obj(
            {
                "ranker": FORWARD,
                "score_threshold": FORWARD,
                "hybrid_search": Obj({"embedding_weight": FORWARD, "text_weight": FORWARD}),
            }
        ),
    },
    "computer": {"type": GATED},
    "computer_use_preview": {
        "type": GATED,
        "display_height": FORWARD,
        "display_width": FORWARD,
        "environment": FORWARD,
    },
    "code_interpreter": {"type": GATED, "container": Typed({"auto": _CONTAINER_AUTO}), "allowed_callers": FORWARD},
    "programmatic_tool_calling": {"type": GATED},
    "image_generation": {
        "type": GATED,
        **{
            k: FORWARD
            for k in (
                "action",
                "background",
                "complexity",
                "frame_count",
                "frame_duration_ms",
                "input_fidelity",
                "model",
                "moderation",
                "output_compression",
                "output_format",
                "partial_images",
                "quality",
                "size",
            )
        },
        "input_image_mask": Obj({"file_id": FORWARD, "image_url": FORWARD}),
        "svg": Obj({"model": FORWARD, "reasoning": Obj({"effort": FORWARD})}),
    },
    "local_shell": {"type": GATED},
    "shell": {"type": GATED, "environment": RESPONSES_SHELL_ENVIRONMENT, "allowed_callers": FORWARD},
    "apply_patch": {"type": GATED, "allowed_callers": FORWARD},
    "tool_search": {"type": GATED, "description": FORWARD, "execution": FORWARD, "parameters": SCHEMA},
}

# -- Messages (anthropic types/beta/beta_tool_union_param.py) -----------------------------------

# Shared with the rest of the Messages tables (messages/fields.py): the citations switch (web_fetch,
# documents, search results) and what every tool and content block has (its type, read by the gate,
# and a prompt-cache breakpoint).
MESSAGES_CITATIONS_ON = Obj({"enabled": FORWARD})
MESSAGES_CACHED: Fields = {"type": GATED, "cache_control": CACHE_CONTROL}
_URL_SOURCE_CHOICE: Fields = {"type": FORWARD, "tools": Typed({"tool_reference": {"type": FORWARD, "name": FORWARD}})}
_URL_SOURCE_RULE = Typed(
    {"all": TYPE_ONLY, "none": TYPE_ONLY, "only": _URL_SOURCE_CHOICE, "except": _URL_SOURCE_CHOICE}
)
# web_fetch's `url_sources`: which URLs (the user's, tool results') it may fetch.
_URL_SOURCES = Obj(
    {
        "user_input": Typed({"all": TYPE_ONLY, "none": TYPE_ONLY}),
        "client_tool_results": _URL_SOURCE_RULE,
        "server_tool_results": _URL_SOURCE_RULE,
    }
)
_TOOL_COMMON: Fields = {
    **MESSAGES_CACHED,
    "name": GATED,
    "allowed_callers": FORWARD,
    "defer_loading": FORWARD,
    "strict": FORWARD,
}
# A tool the client runs (a custom tool, bash, the text editor, ...): it may carry input examples.
MESSAGES_CLIENT_TOOL: Fields = {**_TOOL_COMMON, "input_examples": INPUT_EXAMPLES}
_DISPLAY = ("display_height_px", "display_width_px", "display_number")
_COMPUTER: Fields = {**MESSAGES_CLIENT_TOOL, **dict.fromkeys(_DISPLAY, FORWARD)}
_DOMAINS = ("allowed_domains", "blocked_domains", "max_uses")
_FETCH_OR_SEARCH: Fields = {**_TOOL_COMMON, **dict.fromkeys(_DOMAINS, FORWARD)}
_SEARCH: Fields = {**_FETCH_OR_SEARCH, "user_location": USER_LOCATION}
_FETCH: Fields = {
    **_FETCH_OR_SEARCH,
    "citations": MESSAGES_CITATIONS_ON,
    "max_content_tokens": FORWARD,
    "url_sources": _URL_SOURCES,
}
# A computer or browser toolset: one entry that offers its family's member tools, each called by
# its own name (anthropic-python types/beta/beta_{computer,browser}_toolset20260801_param.py).
# `configs` is keyed by member name (messages/fields.py MESSAGES_TOOLSET_MEMBERS), each value
# MESSAGES_MEMBER_CONFIG.
_TOOLSET: Fields = {**MESSAGES_CACHED, "configs": GATED}
MESSAGES_BUILTIN_TOOLS: Mapping[str, Fields] = {  # by type
    "bash_20241022": MESSAGES_CLIENT_TOOL,
    "bash_20250124": MESSAGES_CLIENT_TOOL,
    "memory_20250818": MESSAGES_CLIENT_TOOL,
    **dict.fromkeys(("text_editor_20241022", "text_editor_20250124", "text_editor_20250429"), MESSAGES_CLIENT_TOOL),
    "text_editor_20250728": {**MESSAGES_CLIENT_TOOL, "max_characters": FORWARD},
    "computer_20241022": _COMPUTER,
    "computer_20250124": _COMPUTER,
    "computer_20251124": {**_COMPUTER, "enable_zoom": FORWARD},
    "computer_toolset_20260801": _TOOLSET,
    "browser_toolset_20260801": _TOOLSET,
    **dict.fromkeys((f"code_execution_{v}" for v in ("20250522", "20250825", "20260120", "20260521")), _TOOL_COMMON),
    "web_search_20250305": _SEARCH,
    "web_search_20260209": _SEARCH,
    "web_search_20260318": {**_SEARCH, "response_inclusion": FORWARD},
    "web_fetch_20250910": _FETCH,
    "web_fetch_20260209": _FETCH,
    "web_fetch_20260309": {**_FETCH, "use_cache": FORWARD},
    "web_fetch_20260318": {**_FETCH, "use_cache": FORWARD, "response_inclusion": FORWARD},
    "tool_search_tool_bm25": _TOOL_COMMON,
    "tool_search_tool_bm25_20251119": _TOOL_COMMON,
    "tool_search_tool_regex": _TOOL_COMMON,
    "tool_search_tool_regex_20251119": _TOOL_COMMON,
    # The advisor is a model the main one consults for advice (text); it is gated as a built-in.
    "advisor_20260301": {
        **_TOOL_COMMON,
        "caching": CACHE_CONTROL,
        "max_tokens": FORWARD,
        "max_uses": FORWARD,
        "model": FORWARD,
    },
}
# The one `name` each typed Messages tool must carry (the API fixes it: the model calls it by
# that name); a typed tool with another name is refused. A typed tool is gated by its type (and
# family) and by this name as a function's (gatekeeper/protocols/messages/gate.py `_tool_ids`).
# Toolsets carry no name: their members are gated one by one (messages/fields.py
# MESSAGES_TOOLSET_MEMBERS).
_FIXED_NAMES = {  # by family: the name the model calls that family's typed tools by
    "bash": "bash",
    "memory": "memory",
    "computer": "computer",
    "code_execution": "code_execution",
    "web_search": "web_search",
    "web_fetch": "web_fetch",
    "advisor": "advisor",
}
_VERSION_NAMES = {  # where the name depends on the version (the text editor was renamed) or the variant
    "text_editor_20241022": "str_replace_editor",
    "text_editor_20250124": "str_replace_editor",
    "text_editor_20250429": "str_replace_based_edit_tool",
    "text_editor_20250728": "str_replace_based_edit_tool",
    **{f"tool_search_tool_{v}{d}": f"tool_search_tool_{v}" for v in ("bm25", "regex") for d in ("", "_20251119")},
}
# The Messages types of the one built-in table (rules/tools.py BUILTIN_FAMILIES): dated (`_YYYYMMDD`)
# or a tool search variant; toolsets have no name.
MESSAGES_BUILTIN_NAMES: Mapping[str, str] = {
    kind: _VERSION_NAMES.get(kind) or _FIXED_NAMES[family]
    for kind, family in BUILTIN_FAMILIES.items()
    if (re.search(r"_\d{8}$", kind) or kind in _VERSION_NAMES) and "_toolset_" not in kind
}
