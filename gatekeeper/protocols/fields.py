"""Every request field each codec knows, per protocol and endpoint: the gate's allowlists.

A field a codec forwards is one listed here, as one of:
  * FORWARD: relayed as sent (it cannot carry a tool or redirect the request);
  * GATED: read by the codec, which gates the tools in it (or decides the tier with it);
  * Refused(why): known, and refused with a 400 that says why (it could bring what the gate
    cannot see: a stored prompt's tools, substitute models, ...).
Anything else is unknown: refused with a 400 naming it (`upstream.unknown_fields: refuse`, the
default) or dropped and logged (`drop`). The same holds inside a tool, a tool choice, an input
item (Responses `input`, chat `messages`, Messages content blocks) and the other objects listed
below, each table keyed by the object's `type` (or role).

The lists follow the published request types (openai-python `types/chat/completion_create_params.py`,
`types/responses/response_create_params.py`, anthropic-python `types/beta/message_create_params.py`
and the tool, choice and item types they use); tests/protocols/test_fields.py compares them with
the installed SDKs, so a field the SDKs grow shows up as a failing test, not as a hole. A few
fields real OpenAI-compatible servers take (vLLM, llama.cpp) are listed where noted. To support a
new field: add it here with how it is treated, and, if GATED, gate it in the codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gatekeeper import logs
from gatekeeper.errors import RequestInvalid
from gatekeeper.gating import BUILTIN_FAMILIES

FORWARD = "forward"
GATED = "gated"


@dataclass(frozen=True)
class Refused:
    why: str


# The objects a codec forwards as they are have their own tables, checked recursively by `check`
# with the same refuse/drop rule and path naming (`messages[0].content[1].foo`). A shape applies
# to an object value and to each element of an array value (content "a string or an array of
# parts"); a plain value (string, number, boolean, null) has no keys to check.


@dataclass(frozen=True)
class Obj:
    """An object with fields of its own."""

    fields: Fields
    how: str = FORWARD  # GATED when the codec also reads it (the effort in `reasoning`, ...)


@dataclass(frozen=True)
class Typed:
    """Objects told apart by their `type`, each checked against its type's table. A type not in
    `tables` is refused whatever the mode: dropping the object would change what it means."""

    tables: Mapping[str, Fields]
    default: str | None = None  # the type of an object that has none
    how: str = FORWARD


@dataclass(frozen=True)
class Map:
    """An object whose keys are the client's own (metadata, headers): each value checked as `values`."""

    values: How


@dataclass(frozen=True)
class Opaque:
    """A value the protocol defines as free-form, forwarded unread: `why` says why that is safe.
    Every one is on the list under "free-form values" below."""

    why: str


@dataclass(frozen=True)
class OneOf:
    """A string from a closed set, alone or in an array (`include`); an unknown one is refused
    (`refuse`) or removed from its array and logged (`drop`)."""

    values: frozenset[str]


# FORWARD alone means a plain value or an array of them (an object there is refused: the
# tables name the fields of every object gatekeeper forwards); GATED alone, that the codec
# checks and gates the value itself.
How = str | Refused | Obj | Typed | Map | Opaque | OneOf
Fields = Mapping[str, How]


def how_of(entry: How) -> str | Refused:
    """FORWARD, GATED or Refused: what is done with a field, whatever its shape."""
    if isinstance(entry, (str, Refused)):
        return entry
    return entry.how if isinstance(entry, (Obj, Typed)) else FORWARD


_STORED_PROMPT = Refused("a stored prompt template may bring tools gatekeeper cannot see")
_OTHER_MODELS = Refused("it names substitute models the tier was not decided for")
_PROGRAMS = Refused("access programs may grant capabilities gatekeeper cannot see")

# -- free-form values, forwarded unread ---------------------------------------------------------
# The only values no table describes. Each is data the model reads, or the client's own keys;
# none can offer a tool, name a model or change the effort, and no server acts on what is inside.

# A JSON schema (a tool's `parameters`/`input_schema`/`output_schema`, `json_schema.schema`, an
# output format's `schema`): the shape of arguments or of an answer, read by the model and the
# server's constrained decoding; its keywords are JSON Schema's, open by design.
SCHEMA = Opaque("a JSON schema: it describes arguments or an answer, it offers nothing")
# The input of an earlier call (Messages `tool_use.input`, `server_tool_use.input`, ...; Responses
# `tool_search_call.arguments`): history the model reads; gatekeeper gates offers, not history.
CALL_INPUT = Opaque("an earlier call's arguments: history, not an offer of a tool")
# Examples of a Messages tool's input (`input_examples`): arguments the model reads as examples.
INPUT_EXAMPLES = Opaque("examples of a tool's arguments, read by the model")
# Data an earlier answer carried, sent back as it came (an MCP tool's error `content`, a Messages
# `fallback` block's `trigger`): the SDKs type it as any JSON value.
ANSWER_DATA = Opaque("an earlier answer's data, sent back as it came")
# Responses `file_search.filters`: comparisons on the attributes of files (`{"type": "and",
# "filters": [...]}`, nested without bound; the SDK types the inner ones as any object).
FILE_FILTERS = Opaque("comparisons on file attributes: they select files, they offer nothing")
# Maps whose keys are the client's own: `metadata` (chat, Responses), `logit_bias` (token id ->
# bias), an MCP server's `headers`, a local shell's `env`, a file's `attributes`. Their values
# must be plain (a string, number or boolean).
PLAIN_MAP = Map(FORWARD)
OPAQUE_VALUES: tuple[Opaque | Map, ...] = (SCHEMA, CALL_INPUT, INPUT_EXAMPLES, ANSWER_DATA, FILE_FILTERS, PLAIN_MAP)

_TYPE_ONLY: Fields = {"type": FORWARD}  # {"type": "json_object"}, {"type": "wait"}, ...
_CACHE_CONTROL = Typed({"ephemeral": {"type": FORWARD, "ttl": FORWARD}})  # Anthropic prompt caching
_MODERATION = Obj(
    {"model": FORWARD, "policy": Obj({"input": Obj({"mode": FORWARD}), "output": Obj({"mode": FORWARD})})}
)

# -- Chat Completions: POST /v1/chat/completions ----------------------------------------------

_CACHE_BREAKPOINT = Obj({"mode": FORWARD, "ttl": FORWARD})  # prompt_cache_breakpoint, prompt_cache_options
# `cache_control` on a part: Anthropic prompt caching in the chat format (LiteLLM, OpenRouter).
_CHAT_TEXT: Fields = {
    "type": FORWARD,
    "text": FORWARD,
    "prompt_cache_breakpoint": _CACHE_BREAKPOINT,
    "cache_control": _CACHE_CONTROL,
}
_CHAT_TEXT_PARTS = Typed({"text": _CHAT_TEXT})
_CHAT_USER_PARTS = Typed(
    {
        "text": _CHAT_TEXT,
        "image_url": {
            "type": FORWARD,
            "image_url": Obj({"url": FORWARD, "detail": FORWARD}),
            "prompt_cache_breakpoint": _CACHE_BREAKPOINT,
            "cache_control": _CACHE_CONTROL,  # LiteLLM, OpenRouter
        },
        "input_audio": {
            "type": FORWARD,
            "input_audio": Obj({"data": FORWARD, "format": FORWARD}),
            "prompt_cache_breakpoint": _CACHE_BREAKPOINT,
        },
        "file": {
            "type": FORWARD,
            "file": Obj({"file_data": FORWARD, "file_id": FORWARD, "filename": FORWARD}),
            "prompt_cache_breakpoint": _CACHE_BREAKPOINT,
            "cache_control": _CACHE_CONTROL,  # LiteLLM, OpenRouter
        },
        # vLLM's multimodal parts
        "video_url": {"type": FORWARD, "video_url": Obj({"url": FORWARD})},
        "audio_url": {"type": FORWARD, "audio_url": Obj({"url": FORWARD})},
    }
)
_CHAT_ASSISTANT_PARTS = Typed({"text": _CHAT_TEXT, "refusal": {"type": FORWARD, "refusal": FORWARD}})
_CHAT_CALLED = Obj({"name": FORWARD, "arguments": FORWARD})  # arguments: a JSON string
_CHAT_TOOL_CALLS = Typed(
    {
        "function": {"type": FORWARD, "id": FORWARD, "function": _CHAT_CALLED},
        "custom": {"type": FORWARD, "id": FORWARD, "custom": Obj({"name": FORWARD, "input": FORWARD})},
    }
)
_JSON_SCHEMA = Obj({"name": FORWARD, "description": FORWARD, "schema": SCHEMA, "strict": FORWARD})
_CHAT_RESPONSE_FORMAT = Typed(
    {"text": _TYPE_ONLY, "json_object": _TYPE_ONLY, "json_schema": {"type": FORWARD, "json_schema": _JSON_SCHEMA}}
)
_APPROXIMATE: Fields = {"city": FORWARD, "country": FORWARD, "region": FORWARD, "timezone": FORWARD}
_GRAMMAR_FORMAT = Typed(
    {"text": _TYPE_ONLY, "grammar": {"type": FORWARD, "grammar": Obj({"definition": FORWARD, "syntax": FORWARD})}}
)


CHAT_REQUEST: Fields = {
    "model": GATED,
    "messages": GATED,  # each message: CHAT_MESSAGE
    "tools": GATED,
    "tool_choice": GATED,
    "functions": GATED,  # legacy
    "function_call": GATED,  # legacy
    "parallel_tool_calls": GATED,
    "reasoning_effort": GATED,  # the effort
    "stream": GATED,
    "stream_options": Obj({"include_usage": FORWARD, "include_obfuscation": FORWARD}),
    "audio": Obj({"format": FORWARD, "voice": Obj({"id": FORWARD})}),  # voice: a name or {"id"}
    "frequency_penalty": FORWARD,
    "logit_bias": PLAIN_MAP,
    "logprobs": FORWARD,
    "max_completion_tokens": FORWARD,
    "max_tokens": FORWARD,
    "metadata": PLAIN_MAP,
    "modalities": OneOf(frozenset({"text", "audio"})),  # what the answer is made of: a closed set
    "moderation": _MODERATION,
    "n": FORWARD,
    "prediction": Typed({"content": {"type": FORWARD, "content": _CHAT_TEXT_PARTS}}),
    "presence_penalty": FORWARD,
    "prompt_cache_key": FORWARD,
    "prompt_cache_options": _CACHE_BREAKPOINT,
    "prompt_cache_retention": FORWARD,
    "response_format": _CHAT_RESPONSE_FORMAT,
    "safety_identifier": FORWARD,
    "seed": FORWARD,
    "service_tier": FORWARD,
    "stop": FORWARD,
    "store": FORWARD,
    "temperature": FORWARD,
    "top_logprobs": FORWARD,
    "top_p": FORWARD,
    "user": FORWARD,
    "verbosity": FORWARD,
    # It turns on the search models' built-in web search (gated as that built-in).
    "web_search_options": Obj(
        {
            "search_context_size": FORWARD,
            "user_location": Typed({"approximate": {"type": FORWARD, "approximate": Obj(_APPROXIMATE)}}),
        },
        how=GATED,
    ),
    # OpenAI-compatible servers (vLLM, llama.cpp): sampling knobs, and template variables.
    "top_k": FORWARD,
    "min_p": FORWARD,
    "repetition_penalty": FORWARD,
    "chat_template_kwargs": GATED,  # CHAT_TEMPLATE_KWARGS: a variable could render tools
}
# Template variables that switch reasoning on or off (Qwen3, DeepSeek, gpt-oss templates).
CHAT_TEMPLATE_KWARGS: Fields = {"enable_thinking": FORWARD, "thinking": FORWARD, "reasoning_effort": FORWARD}
# `content`: a string, or an array of parts (by type) as each role may send them.
_CHAT_SPEAKER: Fields = {"role": FORWARD, "content": _CHAT_TEXT_PARTS, "name": FORWARD}
CHAT_MESSAGE: Mapping[str, Fields] = {  # by role
    "developer": _CHAT_SPEAKER,
    "system": _CHAT_SPEAKER,
    "user": {**_CHAT_SPEAKER, "content": _CHAT_USER_PARTS},
    "assistant": {
        **_CHAT_SPEAKER,
        "content": _CHAT_ASSISTANT_PARTS,
        "audio": Obj({"id": FORWARD}),
        "function_call": _CHAT_CALLED,  # earlier calls: history, not an offer of a tool
        "refusal": FORWARD,
        "tool_calls": _CHAT_TOOL_CALLS,
        "reasoning_content": FORWARD,  # DeepSeek-style reasoning sent back (vLLM, llama.cpp)
    },
    "tool": {"role": FORWARD, "content": _CHAT_TEXT_PARTS, "tool_call_id": FORWARD},
    "function": {**_CHAT_SPEAKER, "content": FORWARD},
}
CHAT_FUNCTION: Fields = {"name": GATED, "description": FORWARD, "parameters": SCHEMA, "strict": FORWARD}
CHAT_CUSTOM: Fields = {"name": GATED, "description": FORWARD, "format": _GRAMMAR_FORMAT}
CHAT_TOOL: Mapping[str, Fields] = {  # by type
    "function": {"type": GATED, "function": GATED},
    "custom": {"type": GATED, "custom": GATED},
}
CHAT_LEGACY_FUNCTION: Fields = {"name": GATED, "description": FORWARD, "parameters": SCHEMA}
CHAT_TOOL_CHOICE: Mapping[str, Fields] = {  # the object forms, by type
    "function": {"type": GATED, "function": GATED},  # function: {"name"}
    "custom": {"type": GATED, "custom": GATED},  # custom: {"name"}
    "allowed_tools": {"type": GATED, "allowed_tools": GATED},  # {"mode", "tools"}
}
CHAT_NAMED: Fields = {"name": GATED}
CHAT_ALLOWED_TOOLS: Fields = {"mode": GATED, "tools": GATED}

# -- Responses: POST /v1/responses -------------------------------------------------------------

_RESPONSES_CACHE_BREAKPOINT = Obj({"mode": FORWARD, "ttl": FORWARD})
_INPUT_TEXT: Fields = {"type": FORWARD, "text": FORWARD, "prompt_cache_breakpoint": _RESPONSES_CACHE_BREAKPOINT}
_INPUT_IMAGE: Fields = {
    "type": FORWARD,
    "detail": FORWARD,
    "file_id": FORWARD,
    "image_url": FORWARD,
    "prompt_cache_breakpoint": _RESPONSES_CACHE_BREAKPOINT,
}
_INPUT_FILE: Fields = {
    "type": FORWARD,
    **{k: FORWARD for k in ("detail", "file_data", "file_id", "file_url", "filename")},
    "prompt_cache_breakpoint": _RESPONSES_CACHE_BREAKPOINT,
}
_INPUT_PARTS = Typed({"input_text": _INPUT_TEXT, "input_image": _INPUT_IMAGE, "input_file": _INPUT_FILE})
_ANNOTATIONS = Typed(
    {
        "file_citation": {k: FORWARD for k in ("type", "file_id", "filename", "index")},
        "url_citation": {k: FORWARD for k in ("type", "end_index", "start_index", "title", "url")},
        "container_file_citation": {
            k: FORWARD for k in ("type", "container_id", "end_index", "file_id", "filename", "start_index")
        },
        "file_path": {k: FORWARD for k in ("type", "file_id", "index")},
    }
)
_TOKEN: Fields = {"bytes": FORWARD, "logprob": FORWARD, "token": FORWARD}
_OUTPUT_TEXT: Fields = {
    "type": FORWARD,
    "text": FORWARD,
    "annotations": _ANNOTATIONS,
    "logprobs": Obj({**_TOKEN, "top_logprobs": Obj(_TOKEN)}),
}
# A message's content: what a client sends, and earlier answers' text sent back.
_MESSAGE_PARTS = Typed(
    {**_INPUT_PARTS.tables, "output_text": _OUTPUT_TEXT, "refusal": {"type": FORWARD, "refusal": FORWARD}}
)
_TEXT_FORMAT = Typed(
    {
        "text": _TYPE_ONLY,
        "json_object": _TYPE_ONLY,
        "json_schema": {k: FORWARD for k in ("type", "name", "description", "strict")} | {"schema": SCHEMA},
    }
)
_REASONING_TEXT = Typed({"reasoning_text": {"type": FORWARD, "text": FORWARD}})
_SUMMARY_TEXT = Typed({"summary_text": {"type": FORWARD, "text": FORWARD}})
_CALLER = Typed({"direct": _TYPE_ONLY, "program": {"type": FORWARD, "caller_id": FORWARD}})
_USER_LOCATION = Typed({"approximate": {"type": FORWARD, **_APPROXIMATE}})
_DOMAIN_POLICY = Typed(
    {
        "disabled": _TYPE_ONLY,
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
_SHELL_ENVIRONMENT = Typed(
    {
        "container_auto": {**_CONTAINER_AUTO, "skills": _SKILLS},
        "local": _LOCAL_ENVIRONMENT,
        "container_reference": _CONTAINER_REFERENCE,
    }
)
_APPROVAL_FILTER = Obj({"read_only": FORWARD, "tool_names": FORWARD})
_COMPUTER_ACTIONS = Typed(
    {
        "click": {k: FORWARD for k in ("type", "button", "keys", "x", "y")},
        "double_click": {k: FORWARD for k in ("type", "keys", "x", "y")},
        "drag": {"type": FORWARD, "keys": FORWARD, "path": Obj({"x": FORWARD, "y": FORWARD})},
        "keypress": {"type": FORWARD, "keys": FORWARD},
        "move": {k: FORWARD for k in ("type", "keys", "x", "y")},
        "screenshot": _TYPE_ONLY,
        "scroll": {k: FORWARD for k in ("type", "keys", "scroll_x", "scroll_y", "x", "y")},
        "type": {"type": FORWARD, "text": FORWARD},
        "wait": _TYPE_ONLY,
    }
)
_SAFETY_CHECK = Obj({"id": FORWARD, "code": FORWARD, "message": FORWARD})
_URL_SOURCE: Fields = {"type": FORWARD, "url": FORWARD}
_WEB_SEARCH_ACTION = Typed(
    {
        "search": {"type": FORWARD, "queries": FORWARD, "query": FORWARD, "sources": Typed({"url": _URL_SOURCE})},
        "open_page": _URL_SOURCE,
        "find_in_page": {"type": FORWARD, "pattern": FORWARD, "url": FORWARD},
    }
)
_MCP_ERROR: Fields = {"type": FORWARD, "code": FORWARD, "message": FORWARD}
_PATCH_OPERATION = Typed(
    {
        "create_file": {"type": FORWARD, "diff": FORWARD, "path": FORWARD},
        "update_file": {"type": FORWARD, "diff": FORWARD, "path": FORWARD},
        "delete_file": {"type": FORWARD, "path": FORWARD},
    }
)

RESPONSES_REQUEST: Fields = {
    "model": GATED,
    "input": GATED,  # each item: RESPONSES_INPUT_ITEM
    "tools": GATED,
    "tool_choice": GATED,
    "parallel_tool_calls": GATED,
    "reasoning": Obj(  # the effort
        {k: FORWARD for k in ("effort", "summary", "generate_summary", "context", "mode")}, how=GATED
    ),
    "stream": GATED,
    "prompt": _STORED_PROMPT,
    "access_programs": _PROGRAMS,
    "background": FORWARD,
    "background_options": Obj({"completion_window": FORWARD, "continuation_id": FORWARD}),
    "context_management": Obj({"type": FORWARD, "compact_threshold": FORWARD}),
    "conversation": Obj({"id": FORWARD}),  # or the id alone
    "image": Obj({"context_compression": FORWARD}),
    # What the answer also carries (data of its items, never a call): a closed set.
    "include": OneOf(
        frozenset(
            {
                "file_search_call.results",
                "web_search_call.results",
                "web_search_call.action.sources",
                "message.input_image.image_url",
                "computer_call_output.output.image_url",
                "code_interpreter_call.outputs",
                "reasoning.encrypted_content",
                "message.output_text.logprobs",
            }
        )
    ),
    "instructions": FORWARD,
    "max_output_tokens": FORWARD,
    "max_tool_calls": FORWARD,
    "metadata": PLAIN_MAP,
    "moderation": _MODERATION,
    "previous_response_id": FORWARD,
    "prompt_cache_key": FORWARD,
    "prompt_cache_options": Obj({k: FORWARD for k in ("mode", "ttl", "prewarm", "comparison_response_id")}),
    "prompt_cache_retention": FORWARD,
    "safety_identifier": FORWARD,
    "service_tier": FORWARD,
    "store": FORWARD,
    "stream_options": Obj({"include_obfuscation": FORWARD}),
    "temperature": FORWARD,
    "text": Obj({"format": _TEXT_FORMAT, "verbosity": FORWARD}),
    "top_logprobs": FORWARD,
    "top_p": FORWARD,
    "truncation": FORWARD,
    "user": FORWARD,
    "client_metadata": PLAIN_MAP,  # sent by Codex (a map of strings)
}
_CALLERS: Fields = {"allowed_callers": FORWARD, "defer_loading": FORWARD}
_RESPONSES_FUNCTION: Fields = {
    "type": GATED,
    "name": GATED,
    "description": FORWARD,
    "parameters": SCHEMA,
    "strict": FORWARD,
    "output_schema": SCHEMA,
    "async": FORWARD,
    **_CALLERS,
}
_RESPONSES_CUSTOM: Fields = {
    "type": GATED,
    "name": GATED,
    "description": FORWARD,
    "format": Typed({"text": _TYPE_ONLY, "grammar": {"type": FORWARD, "definition": FORWARD, "syntax": FORWARD}}),
    "async": FORWARD,
    **_CALLERS,
}
_WEB_SEARCH: Fields = {
    "type": GATED,
    "external_web_access": FORWARD,
    "filters": Obj({"allowed_domains": FORWARD}),
    "search_context_size": FORWARD,
    "user_location": _USER_LOCATION,
}
_WEB_SEARCH_PREVIEW: Fields = {
    "type": GATED,
    "search_content_types": FORWARD,
    "search_context_size": FORWARD,
    "user_location": _USER_LOCATION,
}
RESPONSES_TOOL: Mapping[str, Fields] = {  # by type; built-ins have no `name`: a name is unknown
    "function": _RESPONSES_FUNCTION,
    "custom": _RESPONSES_CUSTOM,
    "namespace": {"type": GATED, "name": GATED, "description": FORWARD, "tools": GATED},
    "mcp": {
        "type": GATED,
        "server_label": GATED,
        "allowed_tools": GATED,
        "server_url": FORWARD,
        "connector_id": FORWARD,
        "authorization": FORWARD,
        "headers": PLAIN_MAP,
        "require_approval": Obj({"always": _APPROVAL_FILTER, "never": _APPROVAL_FILTER}),  # or a word
        "server_description": FORWARD,
        "tunnel_id": FORWARD,
        **_CALLERS,
    },
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
    "shell": {"type": GATED, "environment": _SHELL_ENVIRONMENT, "allowed_callers": FORWARD},
    "apply_patch": {"type": GATED, "allowed_callers": FORWARD},
    "tool_search": {"type": GATED, "description": FORWARD, "execution": FORWARD, "parameters": SCHEMA},
}
# Inside a `namespace` tool (and a tool_search_output's namespaces): function and custom tools.
RESPONSES_NAMESPACE_TOOL: Mapping[str, Fields] = {"function": _RESPONSES_FUNCTION, "custom": _RESPONSES_CUSTOM}
# `mcp.allowed_tools` in its object form (a filter).
RESPONSES_MCP_FILTER: Fields = {"tool_names": GATED, "read_only": GATED}
RESPONSES_TOOL_CHOICE: Mapping[str, Fields] = {  # the object forms, by type
    "allowed_tools": {"type": GATED, "mode": GATED, "tools": GATED},
    "function": {"type": GATED, "name": GATED, "namespace": GATED},
    "custom": {"type": GATED, "name": GATED, "namespace": GATED},
    "mcp": {"type": GATED, "server_label": GATED, "name": GATED},
    # A built-in by its type (the SDK lists file_search, web_search_preview, computer_use, ...).
    **{kind: {"type": GATED} for kind in BUILTIN_FAMILIES},
}
_ID: Fields = {"type": GATED, "id": FORWARD}
_STATUS: Fields = {"status": FORWARD}
RESPONSES_INPUT_ITEM: Mapping[str, Fields] = {  # by type (a message may omit it)
    "message": {**_ID, "role": FORWARD, "content": _MESSAGE_PARTS, "phase": FORWARD, **_STATUS},
    # Items that offer tools: gated like `tools`.
    "additional_tools": {**_ID, "role": FORWARD, "tools": GATED},
    "tool_search_output": {**_ID, "call_id": FORWARD, "execution": FORWARD, "tools": GATED, **_STATUS},
    "mcp_list_tools": {**_ID, "server_label": GATED, "tools": GATED, "error": FORWARD},
    # Earlier calls and their outputs: history, not offers of a tool.
    # (arguments and custom inputs are strings; outputs a string or an array of input parts)
    "function_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("arguments", "async", "call_id", "name", "namespace")},
        "caller": _CALLER,
    },
    "function_call_output": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("call_id", "name", "namespace")},
        "caller": _CALLER,
        "output": _INPUT_PARTS,
    },
    "custom_tool_call": {
        **_ID,
        **{k: FORWARD for k in ("async", "call_id", "input", "name", "namespace")},
        "caller": _CALLER,
    },
    "custom_tool_call_output": {**_ID, "call_id": FORWARD, "caller": _CALLER, "output": _INPUT_PARTS},
    "file_search_call": {
        **_ID,
        **_STATUS,
        "queries": FORWARD,
        "results": Obj({k: FORWARD for k in ("file_id", "filename", "score", "text")} | {"attributes": PLAIN_MAP}),
    },
    "computer_call": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "action": _COMPUTER_ACTIONS,
        "actions": _COMPUTER_ACTIONS,
        "pending_safety_checks": _SAFETY_CHECK,
    },
    "computer_call_output": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "acknowledged_safety_checks": _SAFETY_CHECK,
        "output": Typed({"computer_screenshot": {"type": FORWARD, "file_id": FORWARD, "image_url": FORWARD}}),
    },
    "web_search_call": {**_ID, **_STATUS, "action": _WEB_SEARCH_ACTION},
    "tool_search_call": {**_ID, **_STATUS, "arguments": CALL_INPUT, "call_id": FORWARD, "execution": FORWARD},
    "configuration_update": {
        **_ID,
        "reasoning": Obj({"effort": FORWARD}),
        "text": Obj({"format": Typed({k: _TEXT_FORMAT.tables[k] for k in ("text", "json_schema")})}),
    },
    "reasoning": {
        **_ID,
        **_STATUS,
        "content": _REASONING_TEXT,
        "encrypted_content": FORWARD,
        "summary": _SUMMARY_TEXT,
    },
    "compaction": {**_ID, "encrypted_content": FORWARD},
    "compaction_trigger": _ID,
    "image_generation_call": {
        **_ID,
        **_STATUS,
        **{
            k: FORWARD for k in ("action", "background", "output_format", "quality", "result", "revised_prompt", "size")
        },
        "error": Obj(
            {
                **{k: FORWARD for k in ("type", "code", "message", "param")},
                "moderation_details": Obj({"categories": FORWARD, "moderation_stage": FORWARD}),
            }
        ),
        "svg_usage": Obj(
            {k: FORWARD for k in ("input_tokens", "model", "output_tokens", "reasoning_tokens", "total_tokens")}
        ),
    },
    "code_interpreter_call": {
        **_ID,
        **_STATUS,
        "code": FORWARD,
        "container_id": FORWARD,
        "outputs": Typed({"logs": {"type": FORWARD, "logs": FORWARD}, "image": _URL_SOURCE}),
    },
    "local_shell_call": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "action": Typed(
            {
                "exec": {
                    **{k: FORWARD for k in ("type", "command", "timeout_ms", "user", "working_directory")},
                    "env": PLAIN_MAP,
                }
            }
        ),
    },
    "local_shell_call_output": {**_ID, **_STATUS, "output": FORWARD},
    "shell_call": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "caller": _CALLER,
        "action": Obj({"commands": FORWARD, "max_output_length": FORWARD, "timeout_ms": FORWARD}),
        "environment": Typed({k: _SHELL_ENVIRONMENT.tables[k] for k in ("local", "container_reference")}),
    },
    "shell_call_output": {
        **_ID,
        **_STATUS,
        "call_id": FORWARD,
        "caller": _CALLER,
        "max_output_length": FORWARD,
        "output": Obj(
            {
                "stdout": FORWARD,
                "stderr": FORWARD,
                "outcome": Typed({"timeout": _TYPE_ONLY, "exit": {"type": FORWARD, "exit_code": FORWARD}}),
            }
        ),
    },
    "apply_patch_call": {**_ID, **_STATUS, "call_id": FORWARD, "caller": _CALLER, "operation": _PATCH_OPERATION},
    "apply_patch_call_output": {**_ID, **_STATUS, "call_id": FORWARD, "caller": _CALLER, "output": FORWARD},
    "mcp_approval_request": {**_ID, "arguments": FORWARD, "name": FORWARD, "server_label": FORWARD},
    "mcp_approval_response": {**_ID, "approval_request_id": FORWARD, "approve": FORWARD, "reason": FORWARD},
    "mcp_call": {
        **_ID,
        **_STATUS,
        **{k: FORWARD for k in ("approval_request_id", "arguments", "name", "output", "server_label")},
        "error": Typed(
            {
                "mcp_protocol_error": _MCP_ERROR,
                "http_error": _MCP_ERROR,
                "mcp_tool_execution_error": {"type": FORWARD, "content": ANSWER_DATA},
            }
        ),
    },
    "item_reference": _ID,
    "program": {**_ID, "call_id": FORWARD, "code": FORWARD, "fingerprint": FORWARD},
    "program_output": {**_ID, **_STATUS, "call_id": FORWARD, "result": FORWARD},
}
# A tool_search_output's `tools`: namespaces (RESPONSES_TOOL's namespace), or any top-level tool.
# An mcp_list_tools item's `tools`: the server's tools, each gated as `server_label.name`.
RESPONSES_LISTED_MCP_TOOL: Fields = {
    "name": GATED,
    "input_schema": SCHEMA,
    "annotations": ANSWER_DATA,  # the server's hints about the tool (read-only, ...), sent back as listed
    "description": FORWARD,
}

# -- Messages: POST /v1/messages and /v1/messages/count_tokens --------------------------------

_JSON_OUTPUT = Typed({"json_schema": {"type": FORWARD, "schema": SCHEMA}})
_TOKENS: Fields = {"type": FORWARD, "value": FORWARD}  # {"type": "input_tokens", "value": 1000}, ...
_CONTEXT_EDITS = Typed(
    {
        "clear_tool_uses_20250919": {
            "type": FORWARD,
            "clear_at_least": Typed({"input_tokens": _TOKENS}),
            "clear_tool_inputs": FORWARD,
            "exclude_tools": FORWARD,
            "keep": Typed({"tool_uses": _TOKENS}),
            "trigger": Typed({"input_tokens": _TOKENS, "tool_uses": _TOKENS}),
        },
        "clear_thinking_20251015": {"type": FORWARD, "keep": Typed({"thinking_turns": _TOKENS, "all": _TYPE_ONLY})},
        "compact_20260112": {
            "type": FORWARD,
            "instructions": FORWARD,
            "pause_after_compaction": FORWARD,
            "trigger": Typed({"input_tokens": _TOKENS}),
        },
    }
)
_BLOCK_BINDING = Obj({"prefix_mismatch_behavior": FORWARD})
_THINKING = Typed(
    {
        "enabled": {"type": FORWARD, "budget_tokens": FORWARD, "display": FORWARD, "block_binding": _BLOCK_BINDING},
        "adaptive": {"type": FORWARD, "display": FORWARD, "block_binding": _BLOCK_BINDING},
        "disabled": _TYPE_ONLY,
        "between_tools": _TYPE_ONLY,
    },
    how=GATED,  # the effort (budget)
)
_OUTPUT_CONFIG = Obj(
    {
        "effort": FORWARD,
        "format": _JSON_OUTPUT,
        "task_budget": Typed({"tokens": {"type": FORWARD, "total": FORWARD, "remaining": FORWARD}}),
    },
    how=GATED,  # the effort
)
# Content blocks that other blocks carry too (a tool result's content, a document's source).
_CITATION_LOCATIONS = Typed(
    {
        "char_location": {
            k: FORWARD
            for k in ("type", "cited_text", "document_index", "document_title", "end_char_index", "start_char_index")
        },
        "page_location": {
            k: FORWARD
            for k in ("type", "cited_text", "document_index", "document_title", "end_page_number", "start_page_number")
        },
        "content_block_location": {
            k: FORWARD
            for k in ("type", "cited_text", "document_index", "document_title", "end_block_index", "start_block_index")
        },
        "web_search_result_location": {k: FORWARD for k in ("type", "cited_text", "encrypted_index", "title", "url")},
        "search_result_location": {
            k: FORWARD
            for k in (
                "type",
                "cited_text",
                "end_block_index",
                "search_result_index",
                "source",
                "start_block_index",
                "title",
            )
        },
    }
)
_CITATIONS_ON = Obj({"enabled": FORWARD})
_TEXT_BLOCK: Fields = {
    "type": GATED,
    "cache_control": _CACHE_CONTROL,
    "text": FORWARD,
    "citations": _CITATION_LOCATIONS,
}
_BASE64: Fields = {"type": FORWARD, "data": FORWARD, "media_type": FORWARD}
_URL: Fields = {"type": FORWARD, "url": FORWARD}
_FILE: Fields = {"type": FORWARD, "file_id": FORWARD}
_IMAGE_BLOCK: Fields = {
    "type": GATED,
    "cache_control": _CACHE_CONTROL,
    "source": Typed({"base64": _BASE64, "url": _URL, "file": _FILE}),
    "transformations": Obj({"oversized_image": FORWARD}),
}
_DOCUMENT_BLOCK: Fields = {
    "type": GATED,
    "cache_control": _CACHE_CONTROL,
    "citations": _CITATIONS_ON,
    "context": FORWARD,
    "title": FORWARD,
    "source": Typed(
        {
            "base64": _BASE64,
            "text": _BASE64,
            "url": _URL,
            "file": _FILE,
            "content": {"type": FORWARD, "content": Typed({"text": _TEXT_BLOCK, "image": _IMAGE_BLOCK})},
        }
    ),
}
_SEARCH_RESULT_BLOCK: Fields = {
    "type": GATED,
    "cache_control": _CACHE_CONTROL,
    "citations": _CITATIONS_ON,
    "content": Typed({"text": _TEXT_BLOCK}),
    "source": FORWARD,
    "title": FORWARD,
}
_TOOL_REFERENCE_BLOCK: Fields = {"type": FORWARD, "cache_control": _CACHE_CONTROL, "tool_name": FORWARD}
_BROWSER_STATE_BLOCK: Fields = {
    "type": FORWARD,
    "cache_control": _CACHE_CONTROL,
    "tabs": Obj({"active": FORWARD, "tab_id": FORWARD, "title": FORWARD, "url": FORWARD}),
    "state_changes": Typed(
        {
            "tab_opened": {"type": FORWARD, "tab_id": FORWARD},
            "download_started": {"type": FORWARD, "download_id": FORWARD, "url": FORWARD},
            "download_completed": {k: FORWARD for k in ("type", "download_id", "path", "size_bytes", "url")},
            "download_failed": {k: FORWARD for k in ("type", "download_id", "error", "url")},
        }
    ),
}
# A client tool's result: a string, or these blocks.
_TOOL_RESULT_CONTENT = Typed(
    {
        "text": _TEXT_BLOCK,
        "image": _IMAGE_BLOCK,
        "search_result": _SEARCH_RESULT_BLOCK,
        "document": _DOCUMENT_BLOCK,
        "tool_reference": _TOOL_REFERENCE_BLOCK,
        "browser_state": _BROWSER_STATE_BLOCK,
    }
)
_CALLED_BY = Typed(  # which tool's code made the call (programmatic tool calling)
    {
        "direct": _TYPE_ONLY,
        "code_execution_20250825": {"type": FORWARD, "tool_id": FORWARD},
        "code_execution_20260120": {"type": FORWARD, "tool_id": FORWARD},
    }
)
_ERROR_CODE: Fields = {"type": FORWARD, "error_code": FORWARD}
_ERROR_MESSAGE: Fields = {"type": FORWARD, "error_code": FORWARD, "error_message": FORWARD}
_EXECUTION_OUTPUT = Typed({"code_execution_output": _FILE})
_SERVER_RESULTS: Mapping[str, How] = {  # a server tool's result, sent back: by block type
    "web_search_tool_result": Typed(
        {
            "web_search_tool_result_error": _ERROR_CODE,
            "web_search_result": {k: FORWARD for k in ("type", "encrypted_content", "page_age", "title", "url")},
        }
    ),
    "web_fetch_tool_result": Typed(
        {
            "web_fetch_tool_result_error": _ERROR_CODE,
            "web_fetch_result": {
                "type": FORWARD,
                "retrieved_at": FORWARD,
                "url": FORWARD,
                "content": Typed({"document": _DOCUMENT_BLOCK}),
            },
        }
    ),
    "advisor_tool_result": Typed(
        {
            "advisor_tool_result_error": _ERROR_CODE,
            "advisor_result": {"type": FORWARD, "stop_reason": FORWARD, "text": FORWARD},
            "advisor_redacted_result": {"type": FORWARD, "stop_reason": FORWARD, "encrypted_content": FORWARD},
        }
    ),
    "code_execution_tool_result": Typed(
        {
            "code_execution_tool_result_error": _ERROR_CODE,
            "code_execution_result": {
                **{k: FORWARD for k in ("type", "return_code", "stderr", "stdout")},
                "content": _EXECUTION_OUTPUT,
            },
            "encrypted_code_execution_result": {
                **{k: FORWARD for k in ("type", "return_code", "stderr", "encrypted_stdout")},
                "content": _EXECUTION_OUTPUT,
            },
        }
    ),
    "bash_code_execution_tool_result": Typed(
        {
            "bash_code_execution_tool_result_error": _ERROR_CODE,
            "bash_code_execution_result": {
                **{k: FORWARD for k in ("type", "return_code", "stderr", "stdout")},
                "content": Typed({"bash_code_execution_output": _FILE}),
            },
        }
    ),
    "text_editor_code_execution_tool_result": Typed(
        {
            "text_editor_code_execution_tool_result_error": _ERROR_MESSAGE,
            "text_editor_code_execution_view_result": {
                k: FORWARD for k in ("type", "content", "file_type", "num_lines", "start_line", "total_lines")
            },
            "text_editor_code_execution_create_result": {"type": FORWARD, "is_file_update": FORWARD},
            "text_editor_code_execution_str_replace_result": {
                k: FORWARD for k in ("type", "lines", "new_lines", "new_start", "old_lines", "old_start")
            },
        }
    ),
    "tool_search_tool_result": Typed(
        {
            "tool_search_tool_result_error": _ERROR_MESSAGE,
            "tool_search_tool_search_result": {
                "type": FORWARD,
                "tool_references": Typed({"tool_reference": _TOOL_REFERENCE_BLOCK}),
            },
        }
    ),
}
_TOOL_REFERENCES = Typed(  # what a tool_removal block removes
    {
        "tool_reference": {"type": FORWARD, "name": FORWARD},
        "mcp_tool_reference": {"type": FORWARD, "name": FORWARD, "server_name": FORWARD},
        "mcp_toolset_reference": {"type": FORWARD, "server_name": FORWARD},
    }
)
_URL_SOURCE_CHOICE: Fields = {"type": FORWARD, "tools": Typed({"tool_reference": {"type": FORWARD, "name": FORWARD}})}
_URL_SOURCE_RULE = Typed(
    {"all": _TYPE_ONLY, "none": _TYPE_ONLY, "only": _URL_SOURCE_CHOICE, "except": _URL_SOURCE_CHOICE}
)
# web_fetch's `url_sources`: which URLs (the user's, tool results') it may fetch.
_URL_SOURCES = Obj(
    {
        "user_input": Typed({"all": _TYPE_ONLY, "none": _TYPE_ONLY}),
        "client_tool_results": _URL_SOURCE_RULE,
        "server_tool_results": _URL_SOURCE_RULE,
    }
)

_MESSAGES_COMMON: Fields = {
    "model": GATED,
    "messages": GATED,  # each message: MESSAGES_MESSAGE, its blocks MESSAGES_CONTENT_BLOCK
    "system": GATED,  # a string, or text blocks (MESSAGES_CONTENT_BLOCK["text"])
    "tools": GATED,
    "tool_choice": GATED,
    "mcp_servers": GATED,
    "thinking": _THINKING,
    "output_config": _OUTPUT_CONFIG,
    "cache_control": _CACHE_CONTROL,
    "compaction": Typed({"summarize": {"type": FORWARD, "instructions": FORWARD}}),
    "context_management": Obj({"edits": _CONTEXT_EDITS}),
    "speed": FORWARD,
    "user_profile_id": FORWARD,
    "workspace_id": FORWARD,
    "billing_policy": Typed({"billing_policy": {"type": FORWARD, "bill_to": FORWARD}}),
    "output_format": _JSON_OUTPUT,  # structured outputs (beta)
}
MESSAGES_REQUEST: Fields = {
    **_MESSAGES_COMMON,
    "max_tokens": FORWARD,
    "stream": GATED,
    "metadata": Obj({"user_id": FORWARD}),
    "stop_sequences": FORWARD,
    "temperature": FORWARD,
    "top_p": FORWARD,
    "top_k": FORWARD,
    # an id, or an id and the skills to load in it
    "container": Obj(
        {
            "id": FORWARD,
            "skills": Typed(
                {kind: {"type": FORWARD, "skill_id": FORWARD, "version": FORWARD} for kind in ("anthropic", "custom")}
            ),
        }
    ),
    "diagnostics": Obj({"previous_message_id": FORWARD}),
    "inference_geo": FORWARD,
    "service_tier": FORWARD,
    "thread": Typed({"create": _TYPE_ONLY, "continue": {"type": FORWARD, "previous_message_id": FORWARD}}),
    "fallback_credit_token": Obj({"mode": FORWARD, "token": FORWARD}),
    "fallbacks": _OTHER_MODELS,
}
MESSAGES_COUNT_TOKENS: Fields = _MESSAGES_COMMON
MESSAGES_MESSAGE: Mapping[str, Fields] = {  # by role
    "user": {"role": FORWARD, "content": GATED},
    "assistant": {"role": FORWARD, "content": GATED},
    # A mid-conversation system message (beta): its own output_config would change the effort
    # of the turn from the one the tier was decided for.
    "system": {
        "role": FORWARD,
        "content": GATED,
        "clear_at": FORWARD,
        "output_config": Refused("a per-turn output_config changes the effort the tier was decided for"),
    },
}
_CACHE: Fields = {"type": GATED, "cache_control": _CACHE_CONTROL}
_TOOL_COMMON: Fields = {
    **_CACHE,
    "name": GATED,
    "allowed_callers": FORWARD,
    "defer_loading": FORWARD,
    "strict": FORWARD,
}
_CLIENT_BUILTIN: Fields = {**_TOOL_COMMON, "input_examples": INPUT_EXAMPLES}
_COMPUTER: Fields = {
    **_CLIENT_BUILTIN,
    "display_height_px": FORWARD,
    "display_width_px": FORWARD,
    "display_number": FORWARD,
}
_FETCH_OR_SEARCH: Fields = {
    **_TOOL_COMMON,
    "allowed_domains": FORWARD,
    "blocked_domains": FORWARD,
    "max_uses": FORWARD,
}
_SEARCH: Fields = {**_FETCH_OR_SEARCH, "user_location": _USER_LOCATION}
_FETCH: Fields = {
    **_FETCH_OR_SEARCH,
    "citations": _CITATIONS_ON,
    "max_content_tokens": FORWARD,
    "url_sources": _URL_SOURCES,
}
# A computer or browser toolset: one entry that offers its family's member tools, each called by
# its own name (anthropic-python types/beta/beta_{computer,browser}_toolset20260801_param.py).
# `configs` is keyed by member name (MESSAGES_TOOLSET_MEMBERS), each value MESSAGES_MEMBER_CONFIG.
_TOOLSET: Fields = {**_CACHE, "configs": GATED}
MESSAGES_TOOL: Mapping[str, Fields] = {  # by type; "custom" also stands for a tool without one
    "custom": {
        **_CLIENT_BUILTIN,
        "description": FORWARD,
        "input_schema": SCHEMA,
        "eager_input_streaming": FORWARD,
    },
    "mcp_toolset": {
        **_CACHE,
        "mcp_server_name": GATED,
        "configs": GATED,
        "default_config": GATED,
        "tools": GATED,
    },
    "bash_20241022": _CLIENT_BUILTIN,
    "bash_20250124": _CLIENT_BUILTIN,
    "memory_20250818": _CLIENT_BUILTIN,
    "text_editor_20241022": _CLIENT_BUILTIN,
    "text_editor_20250124": _CLIENT_BUILTIN,
    "text_editor_20250429": _CLIENT_BUILTIN,
    "text_editor_20250728": {**_CLIENT_BUILTIN, "max_characters": FORWARD},
    "computer_20241022": _COMPUTER,
    "computer_20250124": _COMPUTER,
    "computer_20251124": {**_COMPUTER, "enable_zoom": FORWARD},
    "computer_toolset_20260801": _TOOLSET,
    "browser_toolset_20260801": _TOOLSET,
    "code_execution_20250522": _TOOL_COMMON,
    "code_execution_20250825": _TOOL_COMMON,
    "code_execution_20260120": _TOOL_COMMON,
    "code_execution_20260521": _TOOL_COMMON,
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
        "caching": _CACHE_CONTROL,
        "max_tokens": FORWARD,
        "max_uses": FORWARD,
        "model": FORWARD,
    },
}
# The one `name` each typed Messages tool must carry (the API fixes it: the model calls it by
# that name); a typed tool with another name is refused. A typed tool is gated by its type (and
# family) and by this name as a function's (gatekeeper/protocols/messages.py `_tool_ids`).
# Toolsets carry no name: their members are gated one by one (MESSAGES_TOOLSET_MEMBERS).
MESSAGES_BUILTIN_NAMES: Mapping[str, str] = {
    "bash_20241022": "bash",
    "bash_20250124": "bash",
    "memory_20250818": "memory",
    "text_editor_20241022": "str_replace_editor",
    "text_editor_20250124": "str_replace_editor",
    "text_editor_20250429": "str_replace_based_edit_tool",
    "text_editor_20250728": "str_replace_based_edit_tool",
    "computer_20241022": "computer",
    "computer_20250124": "computer",
    "computer_20251124": "computer",
    "code_execution_20250522": "code_execution",
    "code_execution_20250825": "code_execution",
    "code_execution_20260120": "code_execution",
    "code_execution_20260521": "code_execution",
    "web_search_20250305": "web_search",
    "web_search_20260209": "web_search",
    "web_search_20260318": "web_search",
    "web_fetch_20250910": "web_fetch",
    "web_fetch_20260209": "web_fetch",
    "web_fetch_20260309": "web_fetch",
    "web_fetch_20260318": "web_fetch",
    "tool_search_tool_bm25": "tool_search_tool_bm25",
    "tool_search_tool_bm25_20251119": "tool_search_tool_bm25",
    "tool_search_tool_regex": "tool_search_tool_regex",
    "tool_search_tool_regex_20251119": "tool_search_tool_regex",
    "advisor_20260301": "advisor",
}
# The member tools of each toolset: the keys its `configs` may have, and the names the model calls
# them by (anthropic-python types/beta/beta_{computer,browser}_toolset_configs_param.py: "Unknown
# keys are rejected: the field set is this toolset version's complete member set").
_COMPUTER_MEMBERS = frozenset(
    {
        *("cursor_position", "double_click", "hold_key", "key", "left_click", "left_click_drag"),
        *("left_mouse_down", "left_mouse_up", "middle_click", "mouse_move", "right_click", "screenshot"),
        *("scroll", "triple_click", "type", "wait", "zoom"),
    }
)
_BROWSER_MEMBERS = frozenset(
    {
        *("close_tab", "double_click", "file_upload", "find", "form_input", "get_page_text", "hold_key"),
        *("hover", "javascript_exec", "key", "left_click", "left_click_drag", "left_mouse_down"),
        *("left_mouse_up", "list_tabs", "middle_click", "mouse_move", "navigate", "new_tab", "read_console"),
        *("read_network", "read_page", "right_click", "screenshot", "scroll", "scroll_to", "switch_tab"),
        *("triple_click", "type", "wait", "zoom"),
    }
)
MESSAGES_TOOLSET_MEMBERS: Mapping[str, frozenset[str]] = {
    "computer_toolset_20260801": _COMPUTER_MEMBERS,
    "browser_toolset_20260801": _BROWSER_MEMBERS,
}
# One member's config (beta_browser_navigate_config_param.py, ...): `enabled` is read by the gate.
MESSAGES_MEMBER_CONFIG: Fields = {"enabled": GATED, "defer_loading": FORWARD}
MESSAGES_TOOL_CHOICE: Mapping[str, Fields] = {
    "auto": {"type": GATED, "disable_parallel_tool_use": FORWARD},
    "any": {"type": GATED, "disable_parallel_tool_use": FORWARD},
    "tool": {"type": GATED, "name": GATED, "disable_parallel_tool_use": FORWARD},
    "none": {"type": GATED},
}
MESSAGES_MCP_SERVER: Fields = {
    "type": FORWARD,
    "name": GATED,
    "url": FORWARD,
    "authorization_token": FORWARD,
    "tool_configuration": GATED,
}
MESSAGES_MCP_TOOL_CONFIGURATION: Fields = {"allowed_tools": GATED, "enabled": GATED}
MESSAGES_MCP_TOOL_CONFIG: Fields = {"enabled": GATED, "defer_loading": FORWARD}
# An mcp_toolset's (or mcp_tool_listing block's) pinned `tools`: the server's tools by name.
MESSAGES_LISTED_MCP_TOOL: Fields = {
    "name": GATED,
    "description": FORWARD,
    "input_schema": SCHEMA,
    "annotations": ANSWER_DATA,  # the server's hints about the tool (read-only, ...), sent back as listed
}
_RESULT: Fields = {**_CACHE, "tool_use_id": FORWARD}
MESSAGES_CONTENT_BLOCK: Mapping[str, Fields] = {  # by type
    "text": _TEXT_BLOCK,
    "image": _IMAGE_BLOCK,
    "document": _DOCUMENT_BLOCK,
    "search_result": _SEARCH_RESULT_BLOCK,
    "thinking": {"type": GATED, "thinking": FORWARD, "signature": FORWARD},
    "redacted_thinking": {"type": GATED, "data": FORWARD},
    # Earlier calls and results: history, not offers of a tool.
    "tool_use": {
        **_CACHE,
        "id": FORWARD,
        "input": CALL_INPUT,
        "name": FORWARD,
        "caller": _CALLED_BY,
        "toolset_name": FORWARD,
    },
    "server_tool_use": {**_CACHE, "id": FORWARD, "input": CALL_INPUT, "name": FORWARD, "caller": _CALLED_BY},
    "mcp_tool_use": {**_CACHE, "id": FORWARD, "input": CALL_INPUT, "name": FORWARD, "server_name": FORWARD},
    "tool_result": {**_RESULT, "content": _TOOL_RESULT_CONTENT, "is_error": FORWARD, "toolset_name": FORWARD},
    "mcp_tool_result": {**_RESULT, "content": Typed({"text": _TEXT_BLOCK}), "is_error": FORWARD},
    **{
        kind: {**_RESULT, "content": content, **({"caller": _CALLED_BY} if "web_" in kind else {})}
        for kind, content in _SERVER_RESULTS.items()
    },
    "container_upload": {**_CACHE, "file_id": FORWARD},
    "fallback": {"type": GATED, "from": Obj({"model": FORWARD}), "to": Obj({"model": FORWARD}), "trigger": ANSWER_DATA},
    # Blocks that change the offered tools: gated like `tools`.
    "tool_addition": {**_CACHE, "tool": GATED},
    "tool_removal": {**_CACHE, "tool": _TOOL_REFERENCES},  # removing a tool never offers one
    "mcp_tool_listing": {"type": GATED, "mcp_server_name": GATED, "tools": GATED},
    "compaction": {
        **_CACHE,
        "content": FORWARD,
        "encrypted_content": FORWARD,
        "signature": FORWARD,
        "tool_changes": GATED,  # tool_addition / tool_removal entries
    },
}

# -- tool-free endpoints, forwarded as they are: POST /v1/completions and /v1/embeddings -------
# An allowlist too (openai-python types/completion_create_params.py, embedding_create_params.py,
# and the sampling knobs of OpenAI-compatible servers): a denylist of tool fields let
# `extra_body`, `messages` or a `Tools` ride through to an SDK-style upstream (LiteLLM) that
# merges them into a chat call.
COMPLETIONS_REQUEST: Fields = {
    **{
        key: FORWARD
        for key in (
            "model",
            "prompt",
            "best_of",
            "echo",
            "frequency_penalty",
            "logprobs",
            "max_tokens",
            "n",
            "presence_penalty",
            "seed",
            "stop",
            "stream",
            "suffix",
            "temperature",
            "top_p",
            "user",
            "top_k",
            "min_p",
            "repetition_penalty",
        )
    },
    "logit_bias": PLAIN_MAP,
    "stream_options": Obj({"include_usage": FORWARD, "include_obfuscation": FORWARD}),
}
EMBEDDINGS_REQUEST: Fields = {key: FORWARD for key in ("model", "input", "dimensions", "encoding_format", "user")}
PASSTHROUGH_TABLES: Mapping[str, Fields] = {
    "/v1/completions": COMPLETIONS_REQUEST,
    "/v1/embeddings": EMBEDDINGS_REQUEST,
}

# The top-level table of each protocol's main endpoint.
REQUEST_TABLES: Mapping[str, Fields] = {
    "chat": CHAT_REQUEST,
    "responses": RESPONSES_REQUEST,
    "messages": MESSAGES_REQUEST,
}

# What can offer tools, per protocol: top-level fields, and the types of the items
# (Responses `input`) or content blocks (Messages) that carry them. A request with none of these
# has nothing to gate (`carriers`).
TOOL_CARRIERS: Mapping[str, frozenset[str]] = {
    "chat": frozenset(
        {"tools", "tool_choice", "functions", "function_call", "web_search_options", "chat_template_kwargs"}
    ),
    "responses": frozenset({"tools", "tool_choice", "prompt", "access_programs"}),
    "messages": frozenset({"tools", "tool_choice", "mcp_servers", "fallbacks"}),
}
_CARRYING_ITEMS = frozenset({"additional_tools", "tool_search_output", "mcp_list_tools"})
_CARRYING_BLOCKS = frozenset({"tool_addition", "mcp_tool_listing", "compaction"})


def carriers(protocol: str, body: dict[str, Any]) -> list[str]:
    """The fields of `body` that offer (or could offer) tools, `extra_body` (which SDK-style
    upstreams such as LiteLLM merge into the request) included. Empty: nothing to gate."""
    carriers = TOOL_CARRIERS[protocol]
    found = [k for k, v in body.items() if (k in carriers and v is not None) or (k == "extra_body" and v)]
    items = body.get("input") if protocol == "responses" else None
    if isinstance(items, list) and any(isinstance(i, dict) and i.get("type") in _CARRYING_ITEMS for i in items):
        found.append("input")
    if protocol == "messages" and isinstance(body.get("messages"), list):
        for message in body["messages"]:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") in _CARRYING_BLOCKS for b in content
            ):
                found.append("messages")
                break
    return found


# Every name some table refuses (a fast pre-filter for `check`).
_REFUSABLE = frozenset(
    key
    for table in (RESPONSES_REQUEST, MESSAGES_REQUEST, *MESSAGES_MESSAGE.values())
    for key, how in table.items()
    if isinstance(how, Refused)
)

# -- the check ---------------------------------------------------------------------------------

_log = logs.get_logger("gatekeeper")
_SHOWN = 64  # characters of a client's field name shown in an error or log line


def shown(key: str) -> str:
    """A client's key as errors and logs show it (capped)."""
    return key if len(key) <= _SHOWN else key[:_SHOWN] + "..."


_PLAIN = frozenset({str, int, float, bool, type(None)})
_CONTAINERS = (dict, list, tuple)  # tuples: in-process callers pass them where JSON has arrays


def check(obj: dict[str, Any], fields: Fields, where: str, unknown: str) -> None:
    """Refuse what `fields` refuses; refuse (`unknown == "refuse"`) or drop in place (`"drop"`,
    logged) every key of `obj` it does not list, and check the objects inside it by their own
    tables (`Obj`, `Typed`, `Map`, `OneOf`; see above). `where` is the object's path ("" at the
    top, else e.g. "tools[2]"), used to name the field in errors."""
    # Set operations first, and a plain value costs one type lookup: this runs on every
    # message, content part, tool and item of every request.
    if not obj.keys() <= fields.keys():
        _unknown(obj, fields, where, unknown)
    if not _REFUSABLE.isdisjoint(obj):
        _refused(obj, fields, where)
    plain = _PLAIN
    for key, value in obj.items():
        if type(value) in plain or not isinstance(value, _CONTAINERS):
            continue
        entry = fields[key]
        if entry != GATED:  # a GATED value is checked by the codec that reads it
            _value(value, entry, f"{where}.{key}" if where else key, unknown)


def _unknown(obj: dict[str, Any], fields: Fields, where: str, unknown: str) -> None:
    for key in [k for k in obj if k not in fields]:
        path = f"{where}.{shown(key)}" if where else f"'{shown(key)}'"
        if unknown == "drop":
            del obj[key]
            _log.warning("request_field_dropped", field=path.strip("'"))
            continue
        raise RequestInvalid(
            f"{path} is not a field gatekeeper knows here, so it is refused "
            "(upstream.unknown_fields: refuse); see gatekeeper/protocols/fields.py"
        )


def _refused(obj: dict[str, Any], fields: Fields, where: str) -> None:
    for key in obj.keys() & _REFUSABLE:
        how = fields.get(key)
        if isinstance(how, Refused) and obj[key] is not None:
            path = f"{where}.{key}" if where else f"'{key}'"
            raise RequestInvalid(f"{path} is refused: {how.why}")


def _value(value: Any, entry: How, where: str, unknown: str) -> None:
    """Check a field's object or array value against its entry."""
    if isinstance(entry, str):  # FORWARD: a plain value or an array of them
        _plain(value, where)
    elif isinstance(entry, OneOf):
        _one_of(value, entry, where, unknown)
    elif isinstance(entry, (Obj, Typed, Map)):
        if isinstance(value, dict):
            _object(value, entry, where, unknown)
            return
        for i, item in enumerate(value):
            if isinstance(item, dict):
                _object(item, entry, f"{where}[{i}]", unknown)
            elif isinstance(item, (list, tuple)):
                raise RequestInvalid(f"{where}[{i}] must be an object, got an array")
    # Opaque: free-form by the protocol (see the list below); Refused: refused above when set.


def _object(obj: dict[str, Any], entry: Obj | Typed | Map, where: str, unknown: str) -> None:
    if isinstance(entry, Obj):
        check(obj, entry.fields, where, unknown)
    elif isinstance(entry, Typed):
        kind = obj.get("type", entry.default)
        table = entry.tables.get(kind) if isinstance(kind, str) else None
        if table is None:
            check_typed(obj, entry.tables, where, unknown, entry.default)  # refuses it, saying why
        else:
            check(obj, table, where, unknown)
    else:
        for key, value in obj.items():
            if type(value) not in _PLAIN and isinstance(value, _CONTAINERS):
                _value(value, entry.values, f"{where}.{shown(str(key))}", unknown)


def _plain(value: Any, where: str) -> None:
    if isinstance(value, dict):
        raise RequestInvalid(
            f"{where} is an object where gatekeeper knows only plain values (a string, a number, a "
            "boolean or an array of them), so it is refused; see gatekeeper/protocols/fields.py"
        )
    for i, item in enumerate(value):
        if isinstance(item, dict) or (
            isinstance(item, (list, tuple)) and any(isinstance(x, _CONTAINERS) for x in item)
        ):  # arrays of arrays of plain values are token ids (completions, embeddings)
            raise RequestInvalid(f"{where}[{i}] must be a plain value or an array of plain values")


def _one_of(value: Any, entry: OneOf, where: str, unknown: str) -> None:
    if not isinstance(value, list):
        raise RequestInvalid(f"{where} must be an array of strings")
    unknowns = [i for i, item in enumerate(value) if not isinstance(item, str) or item not in entry.values]
    for i in unknowns:
        named = shown(value[i]) if isinstance(value[i], str) else value[i]
        if unknown != "drop":
            raise RequestInvalid(
                f"{where}[{i}] {named!r} is not a value gatekeeper knows here, so it is refused "
                f"(upstream.unknown_fields: refuse; expected one of {sorted(entry.values)})"
            )
        _log.warning("request_value_dropped", field=f"{where}[{i}]", value=named)
    if unknowns:
        value[:] = [item for i, item in enumerate(value) if i not in set(unknowns)]


def check_typed(obj: Any, tables: Mapping[str, Fields], where: str, unknown: str, default: str | None = None) -> str:
    """`check` an object against the table of its `type` (`default` when it has none); returns
    the type. An object of a type not in `tables` is refused whatever the mode: dropping it
    would change what the request means."""
    if not isinstance(obj, dict):
        raise RequestInvalid(f"{where} must be an object, got {type(obj).__name__}")
    kind = obj.get("type", default)
    if not isinstance(kind, str) or kind not in tables:
        named = shown(kind) if isinstance(kind, str) else kind
        raise RequestInvalid(
            f"{where}.type {named!r} is not a type gatekeeper knows here (expected one of {sorted(tables)})"
        )
    check(obj, tables[kind], where, unknown)
    return kind


def check_extra_body(extra: Any, fields: Fields, unknown: str) -> None:
    """An SDK's `extra_body` (merged into the request on the wire by the SDK, and by
    SDK-style upstreams such as LiteLLM): only fields relayed as is may ride in it; a field the
    codec gates must be passed as itself, and an unknown one is refused (or dropped)."""
    if extra is None:
        return
    if not isinstance(extra, dict):
        raise RequestInvalid(f"'extra_body' must be an object, got {type(extra).__name__}")
    for key in list(extra):
        how = fields.get(key)
        if how is not None and how_of(how) != FORWARD:
            raise RequestInvalid(
                f"'extra_body.{shown(key)}' cannot be gated there: pass it as a request field of its own"
            )
    forwarded = _FORWARDED.get(id(fields))
    if forwarded is None:
        forwarded = _FORWARDED[id(fields)] = {k: e for k, e in fields.items() if how_of(e) == FORWARD}
    check(extra, forwarded, "extra_body", unknown)


_FORWARDED: dict[int, Fields] = {}  # per top-level table: its FORWARD fields (the tables live as long as the module)
