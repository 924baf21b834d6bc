"""Every field of a Chat Completions request (`POST /v1/chat/completions`) gatekeeper knows, and
how it treats each: the gate's allowlists (the table language is protocols/schema.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gatekeeper.protocols.builtin_tools import MESSAGES_BUILTIN_TOOLS, RESPONSES_BUILTIN_TOOLS
from gatekeeper.protocols.schema import (
    APPROXIMATE,
    CACHE_CONTROL,
    FORWARD,
    GATED,
    MODERATION,
    PLAIN_MAP,
    SCHEMA,
    TYPE_ONLY,
    Fields,
    Obj,
    OneOf,
    Typed,
    offered_in,
    read_only,
)
from gatekeeper.rules.tools import BUILTIN_FAMILIES

# -- Chat Completions: POST /v1/chat/completions ----------------------------------------------

_CACHE_BREAKPOINT = Obj({"mode": FORWARD, "ttl": FORWARD})  # prompt_cache_breakpoint, prompt_cache_options
# `cache_control` on a part: Anthropic prompt caching in the chat format (LiteLLM, OpenRouter).
_CHAT_TEXT: Fields = {
    "type": FORWARD,
    "text": FORWARD,
    "prompt_cache_breakpoint": _CACHE_BREAKPOINT,
    "cache_control": CACHE_CONTROL,
}
_CHAT_TEXT_PARTS = Typed({"text": _CHAT_TEXT})
_CHAT_USER_PARTS = Typed(
    {
        "text": _CHAT_TEXT,
        "image_url": {
            "type": FORWARD,
            "image_url": Obj({"url": FORWARD, "detail": FORWARD}),
            "prompt_cache_breakpoint": _CACHE_BREAKPOINT,
            "cache_control": CACHE_CONTROL,  # LiteLLM, OpenRouter
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
            "cache_control": CACHE_CONTROL,  # LiteLLM, OpenRouter
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
    {"text": TYPE_ONLY, "json_object": TYPE_ONLY, "json_schema": {"type": FORWARD, "json_schema": _JSON_SCHEMA}}
)
_GRAMMAR_FORMAT = Typed(
    {"text": TYPE_ONLY, "grammar": {"type": FORWARD, "grammar": Obj({"definition": FORWARD, "syntax": FORWARD})}}
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
    "moderation": MODERATION,
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
            "user_location": Typed({"approximate": {"type": FORWARD, "approximate": Obj(APPROXIMATE)}}),
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
# A typed built-in some chat servers take in `tools` (as Responses or Messages define it, in the
# shared table protocols/builtin_tools.py): its own fields, gated by its type. Chat's gate reads its
# `type` (and checks a Messages tool's fixed `name`), nothing else: a member the other protocol's
# gate reads (a Messages toolset's `configs`, which turns members on; an `mcp_toolset`'s tool list)
# is refused here, never forwarded unread.
_UNREAD_ON_CHAT = "chat reads only a built-in tool's type; send this tool through the API that defines it"
CHAT_BUILTIN_TOOL: Mapping[str, Fields] = {
    kind: read_only(
        RESPONSES_BUILTIN_TOOLS.get(kind) or MESSAGES_BUILTIN_TOOLS.get(kind) or {"type": GATED},
        frozenset({"type", "name"}),
        _UNREAD_ON_CHAT,
    )
    for kind in BUILTIN_FAMILIES
}
CHAT_LEGACY_FUNCTION: Fields = {"name": GATED, "description": FORWARD, "parameters": SCHEMA}
CHAT_TOOL_CHOICE: Mapping[str, Fields] = {  # the object forms, by type
    "function": {"type": GATED, "function": GATED},  # function: {"name"}
    "custom": {"type": GATED, "custom": GATED},  # custom: {"name"}
    "allowed_tools": {"type": GATED, "allowed_tools": GATED},  # {"mode", "tools"}
}
CHAT_NAMED: Fields = {"name": GATED}
CHAT_ALLOWED_TOOLS: Fields = {"mode": GATED, "tools": GATED}


# What can offer tools (a request with none of these has nothing to gate: `carriers`).
TOOL_CARRIERS = frozenset(
    {"tools", "tool_choice", "functions", "function_call", "web_search_options", "chat_template_kwargs"}
)


def carriers(body: dict[str, Any]) -> list[str]:
    """The fields of `body` that offer (or could offer) tools. Empty: nothing to gate."""
    return offered_in(body, TOOL_CARRIERS)
