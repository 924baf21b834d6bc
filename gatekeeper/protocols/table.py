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


def codec(name: str) -> Codec | None:
    """The codec for a protocol, or None when it is not served."""
    return CODECS.get(name)


def translator(name: str) -> Translator | None:
    """How a protocol is bridged to a chat-only upstream (None: chat itself needs none)."""
    return TRANSLATORS.get(name)


def served() -> list[str]:
    return sorted(CODECS)
