"""Live drift, as plain data: what the tool calls a model sends say about it.

A benchmark is a snapshot; backends change under the same name. The proxy sees every tool call
a model makes, so each call is classified (`classify`) and shown over a rolling window per
`model@effort` (`Window`, bounded by count and by age). The tier's ceilings (`Ceilings`) are
the fault rates a healthy model stays under; `sequential.py` judges the calls against them and
`monitor.py` owns the state, the worker and the side effects (log line, metric, demotion).

Pure: no I/O, no clock, no threads.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gatekeeper.protocols.base import Call
from gatekeeper.rules.arguments import json_type
from gatekeeper.rules.tiers import Tier

Schema = dict[str, Any]


class Fault(StrEnum):
    """What can be wrong with one tool call. The values are the names the admin API shows."""

    NOT_OFFERED = "notOffered"  # a tool the request did not offer: invented, or hidden by the tier
    INVALID_JSON = "invalidJson"  # arguments that are not JSON (NaN and Infinity are not JSON)
    INVALID_ARGS = "invalidArgs"  # JSON that does not validate against the offered tool's schema
    TEXT_CALL = "textCall"  # a call written as text in the content, not made (drift/text_call.py)


# -- classifying one call ---------------------------------------------------------------------


def classify(call: Call, offered: Mapping[str, Schema | None]) -> Fault | None:
    """The fault of one call, or None when the call is sound."""
    if call.text:
        return Fault.TEXT_CALL
    if not call.offered or call.name not in offered:
        return Fault.NOT_OFFERED
    if call.arguments is None:  # the protocol carries arguments as an object: parsed upstream
        return None
    text = call.arguments
    if not text.strip():
        # Some servers send "" for a call without arguments; that is {} and the schema decides.
        text = "{}"
    try:
        value = _STRICT.decode(text)
    except (ValueError, RecursionError):
        return Fault.INVALID_JSON
    if not isinstance(value, dict):  # tool arguments are always an object
        return Fault.INVALID_ARGS
    schema = offered[call.name]
    if schema is None:
        return None
    validator = _validator_for(schema)
    if validator is None:
        return None
    try:
        return None if validator.is_valid(value) else Fault.INVALID_ARGS
    except Exception:  # noqa: BLE001 - an unresolvable $ref or the like is the client's, not the model's
        return None


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


_STRICT = json.JSONDecoder(parse_constant=_not_json)  # one decoder: json.loads(**kw) builds one per call


def _validator_for(schema: Schema) -> Validator | None:
    try:
        text = json.dumps(schema, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return None
    # The same few tool schemas come back on every request of an agent: cached, but not a huge
    # one (a client's choice), which a bounded count of entries would keep at any size.
    return _validator(text) if len(text) <= _CACHED_SCHEMA else _validator.__wrapped__(text)


_CACHED_SCHEMA = 64 * 1024


@lru_cache(maxsize=512)
def _validator(schema_text: str) -> Validator | None:
    """A validator for a client's schema, or None when the schema itself is not valid.

    A bad schema is the client's fault and must never count against the model. The schema is
    loosened first (see `loosen`); `format` is not asserted (the default), as in the suite.
    """
    schema = loosen(json.loads(schema_text))
    cls = validator_for(schema, default=Draft202012Validator)
    try:
        cls.check_schema(schema)
    except SchemaError:
        return None
    return cls(schema)


# Keywords whose value is one subschema, a list of them, or a mapping name -> subschema.
_ONE = (
    "additionalProperties",
    "unevaluatedProperties",
    "items",
    "additionalItems",
    "unevaluatedItems",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
)
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_MAP = ("properties", "$defs", "definitions", "dependentSchemas")


def loosen(schema: Any) -> Any:
    """The schema without regular expressions (`pattern`, `patternProperties`).

    The patterns come from clients and Python's regex engine holds the GIL while it backtracks:
    a crafted pattern plus a crafted argument could freeze the whole proxy. Drift judges types
    and structure, which is what drifts. Where `patternProperties` goes, the `additional` and
    `unevaluated` properties next to it go too, so the schema is only ever loosened, never
    tightened: a loosened schema cannot make a sound call look faulty.
    """
    if not isinstance(schema, dict):
        return schema
    out = {k: v for k, v in schema.items() if k != "pattern"}
    if "patternProperties" in out:
        for key in ("patternProperties", "additionalProperties", "unevaluatedProperties"):
            out.pop(key, None)
    for key in _ONE:
        if isinstance(out.get(key), dict):
            out[key] = loosen(out[key])
    for key in _LIST:
        if isinstance(out.get(key), list):
            out[key] = [loosen(s) for s in out[key]]
    for key in _MAP:
        if isinstance(out.get(key), dict):
            out[key] = {name: loosen(s) for name, s in out[key].items()}
    return out


# -- the rolling window -----------------------------------------------------------------------


@dataclass(frozen=True)
class Observation:
    """One call as the window keeps it: when, what was wrong, and evidence of it: the tool, the
    fault and the arguments' shape (`shape`); their values only when the operator opted in
    (`drift.evidence_values`)."""

    at: float  # seconds since the epoch (wall clock: replicas compare them)
    fault: Fault | None
    name: str
    shape: dict[str, Any]
    arguments: str | None = None  # truncated to EXAMPLE_CHARS; None unless values are kept

    def example(self) -> dict[str, Any]:
        found = {"fault": self.fault.value if self.fault else None, "name": self.name, "shape": self.shape}
        return found if self.arguments is None else {**found, "arguments": self.arguments}

    def to_json(self) -> dict[str, Any]:
        """As shared with other replicas: the example, and when."""
        return {"at": self.at, **self.example()}

    @classmethod
    def from_json(cls, data: Any) -> Observation:
        """One shared by another replica; ValueError (or TypeError, KeyError) names what is wrong."""
        fault = data["fault"]
        arguments = data.get("arguments")
        if not isinstance(data["at"], int | float) or not isinstance(data["name"], str):
            raise ValueError(f"an observation needs a numeric 'at' and a string 'name': {data!r:.200}")
        if not isinstance(data["shape"], dict) or not (arguments is None or isinstance(arguments, str)):
            raise ValueError(f"an observation's 'shape' is an object, its 'arguments' a string: {data!r:.200}")
        return cls(float(data["at"]), None if fault is None else Fault(fault), data["name"], data["shape"], arguments)


EXAMPLE_CHARS = 120  # arguments can carry user data: keep only enough to show what went wrong
SHAPE_KEYS = 16  # keys of an arguments object the shape names (more are counted)
_SHAPE_KEY_CHARS = 64


def observe(call: Call, offered: Mapping[str, Schema | None], at: float, values: bool = False) -> Observation:
    """`values`: keep the arguments themselves (cut to EXAMPLE_CHARS) beside their shape."""
    fault = classify(call, offered)
    if fault is None:  # only faulty calls are ever shown (Window.examples): nothing to keep
        return Observation(at, None, call.name[:EXAMPLE_CHARS], {})
    args = call.arguments if values else None
    if args is not None and len(args) > EXAMPLE_CHARS:
        args = args[:EXAMPLE_CHARS] + "…"
    return Observation(at, fault, call.name[:EXAMPLE_CHARS], shape(call.arguments), args)


def shape(arguments: str | None) -> dict[str, Any]:
    """What evidence shows of a call's arguments: their shape, never a value (arguments carry
    file contents, commands, credentials). `{"type": "object", "chars": 31, "keys": {"path":
    "string(9)", "content": "string(4096)"}}`; arguments that are not JSON: `{"json": false,
    "chars": 40}`; carried as an object by the protocol (parsed upstream): `{"type": "object"}`."""
    if arguments is None:
        return {"type": "object"}
    try:
        value = _STRICT.decode(arguments if arguments.strip() else "{}")
    except (ValueError, RecursionError):
        return {"json": False, "chars": len(arguments)}
    if not isinstance(value, dict):
        return {"type": _kind(value), "chars": len(arguments)}
    keys = {_key(k): _kind(v) for k, v in list(value.items())[:SHAPE_KEYS]}
    found: dict[str, Any] = {"type": "object", "chars": len(arguments), "keys": keys}
    if len(value) > SHAPE_KEYS:
        found["moreKeys"] = len(value) - SHAPE_KEYS
    return found


def _key(key: str) -> str:
    """A key as shape shows it: printable ASCII, capped (a key is the model's text too)."""
    shown = key.encode("ascii", "backslashreplace").decode()
    shown = "".join(c if c.isprintable() else "?" for c in shown)
    return shown if len(shown) <= _SHAPE_KEY_CHARS else f"{shown[:_SHAPE_KEY_CHARS]}...({len(key)} chars)"


def _kind(value: Any) -> str:
    """A value's JSON type and size: `string(12)`, `array(3)`, `object(2)`, `integer`, ..."""
    kind = json_type(value)
    return f"{kind}({len(value)})" if kind in ("string", "array", "object") else kind


@dataclass(frozen=True)
class Figures:
    """What a window holds now: calls, faults per kind, and the age of its oldest call."""

    calls: int
    faults: dict[Fault, int]
    span_s: float

    def to_json(self) -> dict[str, Any]:
        return {"calls": self.calls, **{f.value: self.faults.get(f, 0) for f in Fault}, "spanS": round(self.span_s, 1)}


@dataclass
class Window:
    """The last `max_calls` calls no older than `max_age_s`, with running counts (O(1) per call)."""

    max_calls: int
    max_age_s: float
    _calls: deque[Observation] = field(default_factory=deque)
    _faults: dict[Fault, int] = field(default_factory=lambda: {f: 0 for f in Fault})

    def add(self, obs: Observation) -> None:
        self._calls.append(obs)
        if obs.fault:
            self._faults[obs.fault] += 1
        while len(self._calls) > self.max_calls:
            self._drop()
        self.prune(obs.at)

    def prune(self, now: float) -> None:
        while self._calls and self._calls[0].at < now - self.max_age_s:
            self._drop()

    def _drop(self) -> None:
        old = self._calls.popleft()
        if old.fault:
            self._faults[old.fault] -= 1

    def resize(self, max_calls: int, max_age_s: float, now: float) -> None:
        self.max_calls, self.max_age_s = max_calls, max_age_s
        while len(self._calls) > max_calls:
            self._drop()
        self.prune(now)

    def clear(self) -> None:
        self._calls.clear()
        self._faults = {f: 0 for f in Fault}

    def figures(self, now: float) -> Figures:
        self.prune(now)
        span = now - self._calls[0].at if self._calls else 0.0
        return Figures(len(self._calls), dict(self._faults), span)

    def examples(self, limit: int) -> list[Observation]:
        """The most recent faulty calls, newest first."""
        found: list[Observation] = []
        for obs in reversed(self._calls):
            if obs.fault:
                found.append(obs)
                if len(found) == limit:
                    break
        return found


# -- judging a window against a tier ----------------------------------------------------------


class Ceilings(BaseModel):
    """The highest error rates a tier is expected to show; null = that fault is not judged."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Strictly between 0 and 1: a ceiling of 0 would demote on the first slip, 1 never.
    not_offered: float | None = Field(default=None, gt=0, lt=1)
    invalid_json: float | None = Field(default=None, gt=0, lt=1)
    invalid_args: float | None = Field(default=None, gt=0, lt=1)
    # Not judged by default (no tier has one in DEFAULT_CEILINGS): the suite does not measure
    # it yet, so there is no benchmark rate a ceiling could be set from; it is counted and
    # shown. An operator who wants it to demote sets one, e.g. `large: {text_call: 0.02}`.
    text_call: float | None = Field(default=None, gt=0, lt=1)

    def of(self, fault: Fault) -> float | None:
        return {
            Fault.NOT_OFFERED: self.not_offered,
            Fault.INVALID_JSON: self.invalid_json,
            Fault.INVALID_ARGS: self.invalid_args,
            Fault.TEXT_CALL: self.text_call,
        }[fault]


# Why these numbers: a `large` model passed >= 90% of the tool-calling suite, and real large
# models essentially never emit broken JSON, so 1-2% already means something changed. `medium`
# passed >= 60% and may slip on harder schemas. `small` has no lower tier: its ceilings only
# mark the pair as drifting (visible, logged), never demote.
DEFAULT_CEILINGS: dict[Tier, dict[str, float]] = {
    Tier.LARGE: {"not_offered": 0.02, "invalid_json": 0.01, "invalid_args": 0.02},
    Tier.MEDIUM: {"not_offered": 0.05, "invalid_json": 0.05, "invalid_args": 0.10},
    Tier.SMALL: {"not_offered": 0.20, "invalid_json": 0.20, "invalid_args": 0.30},
}


def rates(ceiling: float, detect_ratio: float, restore_ratio: float) -> tuple[float, float]:
    """The faulty rate p1 the CUSUM is tuned to, and the restore level R a demotion ends under
    (the arithmetic: gatekeeper.drift.sequential). The caps keep p1 < 1 and c < R < p1."""
    faulty = min(detect_ratio * ceiling, (1 + ceiling) / 2)
    return faulty, min(restore_ratio * ceiling, (ceiling + faulty) / 2)


class DriftSettings(BaseModel):
    """The `drift:` section of the config file (the statistics: gatekeeper.drift.sequential)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    # P(a pair whose rates are at or below its ceilings is demoted within `horizon_calls` calls)
    # is at most 1 - confidence; a demotion ends on calls whose upper bound at this level is
    # under the restore levels (restore_ratio x the ceilings).
    confidence: float = Field(default=0.99, gt=0.5, lt=1)
    horizon_calls: int = Field(default=10_000, ge=100)
    # The fault rate, as a multiple of the ceiling, the test catches fastest. 3 balances: at
    # 5x a `large` pair is demoted in a median of ~160 calls, at 2x in ~1,500 (4: 140 and 2,400).
    detect_ratio: float = Field(default=3.0, gt=1, le=100)
    # A demotion ends when live traffic shows rates under this multiple of the ceilings. At 1, a
    # `large` pair back at 0.9x its ceilings was restored within 20,000 calls 0 times in 200; at
    # 1.5, 197 times (median 3,522 calls; 305 with no fault), and one kind still at 2x its ceiling
    # ended it within 10,000 calls 0-2 times in 200 (at 2: 44-48). scripts/drift_simulation.py
    # section 5. Below detect_ratio, or a fault it was demoted for would end it.
    restore_ratio: float = Field(default=1.5, ge=1, le=100)
    # Failing evidence from this many distinct clients demotes a pair for everyone; fewer demote
    # it only for the clients whose own traffic shows it.
    min_clients: int = Field(default=3, ge=1, le=100)
    # A header set by a trusted front proxy naming the client (e.g. x-forwarded-user); it
    # replaces the credential hash as the identity. Clients must not be able to set it.
    client_header: str | None = Field(default=None, pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
    # The header whose credential the upstream checks: the client's identity when no
    # client_header names it (gatekeeper.drift.identity). auto: api-key on an Azure host,
    # x-api-key or authorization for a request sent natively as Anthropic Messages, else
    # authorization; none: the
    # upstream checks no credential (any value would do), so every client is anonymous.
    credential_header: Literal["auto", "authorization", "x-api-key", "api-key", "none"] = "auto"
    window_calls: int = Field(default=1000, ge=1, le=100_000)  # calls a demotion's end is judged on
    window_s: float = Field(default=3600.0, gt=0)  # the figures shown (GET /admin/drift) are this recent
    remeasure: bool = True  # measure the pair again when it is demoted for everyone
    # Evidence (log lines, demotion records, the admin API) shows a failed call's tool, fault and
    # the arguments' shape (keys, types, sizes), never their values; true adds the values (the
    # first 120 characters): opt in only where logs may hold what agents write (files, secrets).
    evidence_values: bool = False
    ceilings: dict[Tier, Ceilings] = Field(default_factory=dict)

    @field_validator("client_header")
    @classmethod
    def _lower(cls, value: str | None) -> str | None:
        if value is not None and value.lower() in ("authorization", "x-api-key", "api-key"):
            raise ValueError("names a credential header; those are the default identity already (hashed)")
        return value.lower() if value is not None else None

    @model_validator(mode="before")
    @classmethod
    def _merge_ceilings(cls, data: Any) -> Any:
        # A config names only what it changes: `ceilings: {large: {invalid_args: 0.05}}` keeps
        # every other default of every tier.
        if not isinstance(data, dict):
            return data
        given = data.get("ceilings") or {}
        if not isinstance(given, dict):
            return data
        merged: dict[Any, Any] = {tier.value: dict(values) for tier, values in DEFAULT_CEILINGS.items()}
        for tier, values in given.items():
            if tier in merged and isinstance(values, dict):
                merged[tier].update(values)
            else:
                merged[tier] = values  # let validation name the bad tier or value
        return {**data, "ceilings": merged}

    @model_validator(mode="after")
    def _demotions_can_end(self) -> DriftSettings:
        if self.restore_ratio >= self.detect_ratio:
            raise ValueError(
                f"restore_ratio {self.restore_ratio} must be below detect_ratio {self.detect_ratio}: a pair "
                "failing at the rate it was demoted for would be restored"
            )
        # A demotion ends on at most `window_calls` calls of a client: with fewer than a faultless
        # run needs to put the upper bound under the lowest restore level, it would never end.
        for tier, ceilings in self.ceilings.items():
            lowest = min((c for c in ceilings.model_dump().values() if c is not None), default=None)
            if lowest is None:
                continue
            restore = rates(lowest, self.detect_ratio, self.restore_ratio)[1]
            needed = math.ceil(math.log(1 - self.confidence) / math.log1p(-restore))
            if self.window_calls < needed:
                raise ValueError(
                    f"window_calls {self.window_calls} is fewer than the {needed} faultless calls that end a "
                    f"demotion of {tier.value} (ceiling {lowest} x restore_ratio {self.restore_ratio} at "
                    f"confidence {self.confidence}): raise window_calls or restore_ratio, or lower confidence"
                )
        return self

    def ceilings_for(self, tier: Tier) -> Ceilings:
        return self.ceilings.get(tier) or Ceilings(**DEFAULT_CEILINGS[tier])
