"""The fields of the tool-free endpoints gatekeeper forwards as they are (`POST /v1/completions`,
`/v1/embeddings`): allowlists too."""

from __future__ import annotations

from collections.abc import Mapping

from gatekeeper.protocols.schema import FORWARD, PLAIN_MAP, Fields, Obj

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
