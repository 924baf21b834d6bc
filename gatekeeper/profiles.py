"""Capability profiles and where they are kept (`models_profile.json`, the seed's format)."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import structlog
from cachetools import TTLCache
from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from gatekeeper.errors import StoreError
from gatekeeper.suite import Suite
from gatekeeper.tiers import Tier

log = structlog.get_logger("gatekeeper.profiles")

DEFAULT_EFFORT = "default"


def profile_key(model: str, effort: str | None) -> str:
    """`model@effort`; a request with no effort is keyed `model@default`."""
    return f"{model}@{effort or DEFAULT_EFFORT}"


def split_key(key: str) -> tuple[str, str]:
    model, sep, effort = key.rpartition("@")
    return (model, effort) if sep else (key, DEFAULT_EFFORT)


class _Camel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class TestResult(_Camel):
    __test__ = False  # not a pytest class

    name: str
    category: str
    score: float


class Profile(_Camel):
    """What one benchmark run measured for one `model@effort`."""

    model: str
    provider: str
    tier: Tier
    scores: dict[str, float]
    tokens_per_second: float
    tested_at: str
    benchmark_version: int
    tests_hash: str
    test_results: list[TestResult] = Field(default_factory=list)
    reasoning_effort: str = DEFAULT_EFFORT
    avg_completion_tokens: float = 0.0
    # False when the backend refused the reasoning_effort field and the suite ran without it.
    effort_applied: bool = True
    duration_s: float = 0.0
    # Confidence (absent in the seed's format = one sample): samples run, 95% interval per category,
    # and the seed the randomised tests were drawn from (replays the measurement exactly).
    samples: int | None = None
    score_intervals: dict[str, list[float]] | None = None
    instance_seed: int | None = None

    @property
    def key(self) -> str:
        return profile_key(self.model, self.reasoning_effort)

    def is_valid_for(self, suite: Suite) -> bool:
        """A profile counts only if measured by this benchmark version on these exact test files."""
        return self.benchmark_version == suite.version and self.tests_hash == suite.hash

    def to_json(self) -> dict[str, Any]:
        # The optional confidence fields are left out when unset, so a one-sample profile of a
        # fixed suite is written in exactly the seed's format.
        unset = {k for k in ("samples", "score_intervals", "instance_seed") if getattr(self, k) is None}
        return self.model_dump(mode="json", by_alias=True, exclude=unset)


@dataclass
class StoreData:
    profiles: dict[str, Profile] = field(default_factory=dict)
    recommendations: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "profiles": {key: p.to_json() for key, p in sorted(self.profiles.items())},
            "recommendations": dict(sorted(self.recommendations.items())),
        }


class ProfileStore(Protocol):
    """Where profiles live. Implementations must be safe to call from several threads."""

    def load(self) -> StoreData: ...

    def get(self, key: str) -> Profile | None: ...

    def save(self, profiles: list[Profile], recommendations: dict[str, str] | None = None) -> None: ...

    def delete(self, key: str) -> bool: ...


class JsonFileStore:
    """`models_profile.json` with atomic writes, a cross-process file lock and a short memory cache.

    Writers take the lock, re-read the file, merge and replace it (temporary file + rename), so
    two processes writing at once lose nothing, and readers, which take no lock, never see half a
    file. An unreadable or corrupt file reads as empty (every model falls back to its unmeasured
    tier) and is logged; the next write renames it aside, never deletes it. Reading alone never
    moves or creates a file.
    """

    def __init__(self, path: str | Path, cache_ttl_s: float = 1.0) -> None:
        self.path = Path(path)
        self._lock = FileLock(str(self.path) + ".lock", timeout=30)
        self._thread_lock = threading.Lock()
        self._cache: TTLCache[str, StoreData] = TTLCache(maxsize=1, ttl=cache_ttl_s)
        self.problem: str | None = None  # why the file could not be used at the last read

    def load(self) -> StoreData:
        with self._thread_lock:
            data = self._cache.get("data")
        if data is None:
            data = self._read()
            with self._thread_lock:
                self._cache["data"] = data
        return data

    def get(self, key: str) -> Profile | None:
        return self.load().profiles.get(key)

    def save(self, profiles: list[Profile], recommendations: dict[str, str] | None = None) -> None:
        with self._lock:
            data = self._read_for_write()
            for profile in profiles:
                data.profiles[profile.key] = profile
            data.recommendations.update(recommendations or {})
            self._write(data)
        with self._thread_lock:
            self._cache["data"] = data

    def delete(self, key: str) -> bool:
        with self._lock:
            data = self._read_for_write()
            found = data.profiles.pop(key, None) is not None
            if found:
                self._write(data)
        with self._thread_lock:
            self._cache["data"] = data
        return found

    def _read(self) -> StoreData:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            self.problem = None
            return StoreData()
        except OSError as exc:
            return self._unusable(f"unreadable: {exc}")
        try:
            doc = json.loads(raw)
            if not isinstance(doc, dict):
                raise ValueError("top level is not an object")
            profiles = {key: Profile.model_validate(p) for key, p in (doc.get("profiles") or {}).items()}
            recommendations = {str(k): str(v) for k, v in (doc.get("recommendations") or {}).items()}
        except (ValueError, ValidationError, AttributeError, TypeError) as exc:
            return self._unusable(f"corrupt: {str(exc).splitlines()[0]}")
        self.problem = None
        return StoreData(profiles, recommendations)

    def _unusable(self, reason: str) -> StoreData:
        if reason != self.problem:  # once per problem, not once per cache refresh
            log.error("store_unusable", path=str(self.path), reason=reason, treated_as="empty")
        self.problem = reason
        return StoreData()

    def _read_for_write(self) -> StoreData:
        """Read under the lock; a file that cannot be used is renamed aside before it is replaced."""
        if self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory, not a profile store file")
        data = self._read()
        if self.problem is not None and self.path.exists():
            try:
                head = self.path.read_bytes()[:4096].lstrip()
            except OSError:
                head = b""  # unreadable: nothing to judge it by; move it aside like a corrupt store
            if head and not head.startswith(b"{"):
                # Not something a store ever wrote (a mistyped --store path?): leave it be.
                raise StoreError(f"{self.path}: not a profile store ({self.problem}); refusing to replace it")
            aside = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            os.replace(self.path, aside)
            log.error("store_set_aside", path=str(self.path), reason=self.problem, moved_to=str(aside))
            self.problem = None
        return data

    def _write(self, data: StoreData) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data.to_json(), out, indent=2, ensure_ascii=False)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
