"""Thin integrations of gatekeeper with other runtimes, over gatekeeper's public API.

Installed as `gatekeeper.adapters` (the repository keeps them in the top-level `adapters/`):

- `gatekeeper.adapters.litellm_hook`: a LiteLLM proxy pre-call hook (`proxy_handler_instance`).
- `gatekeeper.adapters.openai_sdk`: `gate_client(client, gk)` for `openai.OpenAI` / `openai.AsyncOpenAI`.
- `gatekeeper.adapters.anthropic_sdk`: the same for `anthropic.Anthropic` / `anthropic.AsyncAnthropic`.

Each module is imported on its own, so using one never imports the other's runtime.
"""
