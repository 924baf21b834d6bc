"""The protocols gatekeeper serves: one codec each and, when a chat-only upstream can serve the
protocol, its translator. An explicit table: adding a protocol is one line here."""

from __future__ import annotations

from gatekeeper.protocols import chat, messages, responses
from gatekeeper.protocols.base import Codec, Translator
from gatekeeper.protocols.translate.messages import MessagesTranslator
from gatekeeper.protocols.translate.responses import ResponsesTranslator

CODECS: dict[str, Codec] = {
    "chat": chat.CODEC,
    "responses": responses.CODEC,
    "messages": messages.CODEC,
}
TRANSLATORS: dict[str, Translator] = {
    "responses": ResponsesTranslator(),
    "messages": MessagesTranslator(),
}


# Endpoints whose requests have their own field allowlist (protocols/fields.py).
ENDPOINT_CODECS: dict[tuple[str, str], Codec] = {
    ("messages", "count_tokens"): messages.COUNT_TOKENS_CODEC,
}


def codec(name: str, endpoint: str | None = None) -> Codec | None:
    """The codec for a protocol (and endpoint, e.g. "count_tokens"), or None when not served."""
    return ENDPOINT_CODECS.get((name, endpoint)) if endpoint is not None else CODECS.get(name)


def translator(name: str) -> Translator | None:
    """How a protocol is bridged to a chat-only upstream (None: chat itself needs none)."""
    return TRANSLATORS.get(name)


def served() -> list[str]:
    return sorted(CODECS)
