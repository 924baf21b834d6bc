"""One codec per client protocol; see base.py for the contract.

The registry maps a protocol name ("chat", "responses", "messages") to its codec and, when the
protocol can be served by a chat-only upstream, its Translator. Codec modules register
themselves when imported; `codec(name)` imports the known modules on first use.
"""

from __future__ import annotations

import importlib

import structlog

from gatekeeper.protocols.base import Codec, Translator

log = structlog.get_logger("gatekeeper.protocols")

_CODECS: dict[str, Codec] = {}
_TRANSLATORS: dict[str, Translator] = {}
# Modules that register codecs when imported, in order; a missing one is simply not served.
_MODULES = ("gatekeeper.protocols.chat", "gatekeeper.protocols.responses", "gatekeeper.protocols.messages")
_loaded = False


def register(codec: Codec, translator: Translator | None = None) -> None:
    """Make `codec` serve its protocol (and `translator` bridge it to chat-only upstreams)."""
    _CODECS[codec.name] = codec
    if translator is not None:
        _TRANSLATORS[codec.name] = translator


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in _MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise  # a broken codec module must not pass for an absent one
            log.debug("protocol_absent", module=module)


def codec(name: str) -> Codec | None:
    """The registered codec for a protocol, or None when it is not served."""
    _load()
    return _CODECS.get(name)


def translator(name: str) -> Translator | None:
    _load()
    return _TRANSLATORS.get(name)


def served() -> list[str]:
    _load()
    return sorted(_CODECS)
