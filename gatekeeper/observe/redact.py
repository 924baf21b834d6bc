"""What may be shown of a string: URL credentials redacted, client text capped and made printable.

Two jobs, one module, because every log line and error message needs both:

* `redact_url` / `redact`: a URL's password (and user name) never reach a log line, an error
  body, a page or the CLI's output (`redis://:PASSWORD@host` becomes `redis://***@host`), nor
  does a credential in its query (`?password=PASSWORD` becomes `?password=***`).
* `clip`: a string a client chose (a model name, a tool name, a header) is cut to a bounded
  length and its control characters escaped, so one request cannot write megabytes of log or
  error body, nor forge a line of a text log.

`cap_strings` is the structlog processor that applies both to every value of every log line:
the last line of defence behind the call sites, which clip what they put into messages.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import MutableMapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

# Long enough for any real model id, tool name or path, and for a useful error message;
# short enough that a hostile value costs nothing to log.
CLIENT_TEXT_LIMIT = 256
MESSAGE_LIMIT = 2048
LOG_VALUE_LIMIT = 4096
# Tracebacks are longer than any message but are ours, not the client's (their message lines
# are already capped when the exception was made).
_LOG_TRACEBACK_LIMIT = 16384

# scheme://user:password@ or scheme://user@, anywhere in a text (messages embed URLs).
# Up to the last `@` before the host's end: a password may contain a raw `@` (`redis://:p@ss@h`).
_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^\s/?#]*)@")
# A credential in a URL's query: redis-py takes `?password=` (the documented form for a unix
# socket: `unix:///run/redis.sock?password=...`), some HTTP APIs take `?key=` / `?api_key=`.
_QUERY_SECRET = re.compile(
    r"(?P<name>[?&;](?:password|passwd|pwd|pass|secret|token|access_token|auth|key|api[_-]?key|apikey)=)[^&;#\s]*",
    re.IGNORECASE,
)
# Control and invisible-formatting characters that could forge a log line or hide text.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
# What a client's x-request-id may be: a uuid, a ULID, a trace id, a short tag.
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")


def redact_url(url: str) -> str:
    """`url` with its user name and password replaced by `***` (unchanged when it has none)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return redact(url)
    if "@" not in parts.netloc:
        return _QUERY_SECRET.sub(r"\g<name>***", url)
    host = parts.netloc.rpartition("@")[2]
    return _QUERY_SECRET.sub(r"\g<name>***", urlunsplit(parts._replace(netloc=f"***@{host}")))


def redact(text: str) -> str:
    """Every `scheme://userinfo@` in `text` with the user info replaced by `***`."""
    if "://" not in text:
        return text
    return _QUERY_SECRET.sub(r"\g<name>***", _CREDENTIALS.sub(lambda m: f"{m['scheme']}***@", text))


def address_forms(url: str) -> list[str]:
    """How an error may spell where a server lives: its URL, its origin and its `host:port`,
    each also JSON-escaped (`http:\\/\\/host`), without any user info (a URL too malformed to
    split: itself alone)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return [url]
    netloc = parts.netloc.rpartition("@")[2]
    forms = [urlunsplit(parts._replace(netloc=netloc)).rstrip("/"), f"{parts.scheme}://{netloc}", netloc]
    return forms + [form.replace("/", "\\/") for form in forms if "/" in form]


def scrub(data: bytes, secrets: tuple[bytes, ...]) -> bytes:
    """`data` with every occurrence of each secret replaced by `***`: an upstream that echoes
    the credential the proxy sent for the operator (`Incorrect API key provided: sk-...`) must not
    show it to a client that never had it."""
    for secret in secrets:
        if secret and secret in data:
            data = data.replace(secret, b"***")
    return data


def clip(text: object, limit: int = CLIENT_TEXT_LIMIT) -> str:
    """`text` (any value, as str) with control characters escaped, cut to `limit` characters.

    What is cut is said, with its size, so a reader knows the value was longer."""
    value = text if isinstance(text, str) else str(text)
    cut = len(value) - limit
    if cut > 0:
        value = value[:limit]
    if _UNSAFE.search(value):
        value = _UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", value)
    return f"{value}...[{cut} more characters]" if cut > 0 else value


def request_id(value: str | None) -> str:
    """A client's `x-request-id` when it is a short token of safe characters, else a new one:
    128 random bits in hex, as `uuid4().hex` spells them (`new_id`)."""
    if value and _REQUEST_ID.match(value):
        return value
    return new_id(128)


# Ids name requests and answer items; they guard nothing, so they cost no system call. A private
# generator, seeded from the OS: an application that seeds `random` (a test, a notebook) makes
# no two runs share ids; a forked worker process reseeds it.
_IDS = random.Random()
os.register_at_fork(after_in_child=_IDS.seed)


def new_id(bits: int) -> str:
    """`bits` random bits in hex (a multiple of 4: `bits // 4` digits)."""
    return f"{_IDS.getrandbits(bits):0{bits // 4}x}"


def cap_strings(logger: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: every string value (also inside lists and dicts) redacted and capped."""
    for key, value in event.items():
        kind = type(value)
        if kind is str and len(value) <= LOG_VALUE_LIMIT and "@" not in value and "?" not in value:
            continue  # the common case, on every request's line: nothing to do (no user info, no query)
        if kind in _SCALARS:
            continue
        if kind is list and len(value) <= 64 and all(_shown_as_is(v) for v in value):
            continue  # also common: the tools kept and hidden, names that redact and capping leave as they are
        limit = _LOG_TRACEBACK_LIMIT if key in ("exception", "stack") else LOG_VALUE_LIMIT
        event[key] = _capped(value, limit, 0)
    return event


_SCALARS = (int, float, bool, type(None))


def _shown_as_is(item: Any) -> bool:
    """Whether `_capped` leaves a list item as it is: a short string with no URL in it."""
    return type(item) is str and len(item) <= CLIENT_TEXT_LIMIT and "://" not in item


def _capped(value: Any, limit: int, depth: int) -> Any:
    if isinstance(value, str):
        if len(value) > limit:
            value = f"{value[:limit]}...[{len(value) - limit} more characters]"
        return redact(value)
    if depth > 3:  # log values are flat in practice; deeper nesting is shown as its repr
        return _capped(repr(value), limit, 0) if isinstance(value, (list, tuple, dict)) else value
    # Items of lists and dicts are names (tools kept, hidden, blocked): a name's length each, and
    # 64 of them, so a request offering a thousand long names still logs a short line.
    if isinstance(value, (list, tuple)):
        items = [_capped(v, CLIENT_TEXT_LIMIT, depth + 1) for v in value[:64]]
        if len(value) > 64:
            items.append(f"...[{len(value) - 64} more items]")
        return items
    if isinstance(value, dict):
        return {
            _capped(k, CLIENT_TEXT_LIMIT, depth + 1): _capped(v, CLIENT_TEXT_LIMIT, depth + 1)
            for k, v in list(value.items())[:64]
        }
    if isinstance(value, _SCALARS):
        return value
    # Anything else (an exception, a path) is rendered by its repr, which may quote a client's
    # string: a long one is replaced by its capped text.
    shown = repr(value)
    return _capped(shown, limit, depth) if len(shown) > limit or "@" in shown or "?" in shown else value
