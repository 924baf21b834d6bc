"""Thin integrations of gatekeeper with other runtimes, over gatekeeper's public API.

- `adapters.litellm_hook`: a LiteLLM proxy pre-call hook (`proxy_handler_instance`).
- `adapters.openai_sdk`: `gate_client(client, gk)` for `openai.OpenAI` / `openai.AsyncOpenAI`.

Each module is imported on its own, so using one never imports the other's runtime.
"""
