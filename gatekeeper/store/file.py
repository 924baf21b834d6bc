"""The JSON file store (`models_profile.json`) and per-pair lease files for processes on one host."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from cachetools import TTLCache
from filelock import FileLock

from gatekeeper.errors import StoreError
from gatekeeper.observe import logs
from gatekeeper.store.base import ChangeListener, Lease, StoreData, backoff_delay, read_entries
from gatekeeper.store.profile import Profile

log = logs.get_logger(__name__)


class JsonFileStore:
    """`models_profile.json` with atomic writes, a cross-process file lock and a short memory cache.

    Writers take the lock, re-read the file, merge and replace it (temporary file + rename), so
    two processes writing at once lose nothing, and readers, which take no lock, never see half a
    file. Validity is per entry: an entry that is not a profile is skipped with a warning and
    written back untouched. A file that is not a JSON object reads as empty (every model falls
    back to its unmeasured tier) and is logged; the next write renames it aside, never deletes it.
    Reading alone never moves or creates a file. A writer killed mid-save leaves its temporary
    file behind; the next write removes it.
    """

    def __init__(self, path: str | Path, cache_ttl_s: float = 1.0) -> None:
        self.path = Path(path)
        self.location = str(self.path)
        self._lock = FileLock(str(self.path) + ".lock", timeout=30)
        self._thread_lock = threading.Lock()
        self._cache: TTLCache[str, StoreData] = TTLCache(maxsize=1, ttl=cache_ttl_s)
        self._listeners: list[ChangeListener] = []
        self._coordinator: FileCoordinator | None = None
        self._sessions: FileSessions | None = None
        self.problem: str | None = None  # why the file could not be used at the last read

    def load(self) -> StoreData:
        with self._thread_lock:
            data = self._cache.get("data")
        if data is None:
            data = self._refresh()
        return data

    def get(self, key: str) -> Profile | None:
        return self.load().profiles.get(key)

    def fetch(self, key: str) -> Profile | None:
        """Read the file now: another process may have written the pair since the cache was filled."""
        return self._refresh().profiles.get(key)

    def save(
        self, profiles: list[Profile], recommendations: dict[str, str] | None = None, lease: Lease | None = None
    ) -> bool:
        with self._lock:
            if lease is not None and not self.coordinator().admit(lease):
                return False
            data = self._read_for_write()
            for profile in profiles:
                data.profiles[profile.key] = profile
                data.invalid.pop(profile.key, None)
            data.recommendations.update(recommendations or {})
            self._write(data)
        self._remember(data)
        for profile in profiles:
            self._notify(profile.key)
        return True

    def delete(self, key: str) -> bool:
        with self._lock:
            data = self._read_for_write()
            found = data.profiles.pop(key, None) is not None
            found = data.invalid.pop(key, None) is not None or found
            if found:
                self._write(data)
        self._remember(data)
        if found:
            self._notify(key)
        return found

    def coordinator(self) -> FileCoordinator:
        if self._coordinator is None:
            self._coordinator = FileCoordinator(self.path.with_name(self.path.name + ".leases"))
        return self._coordinator

    def sessions(self) -> FileSessions:
        if self._sessions is None:
            self._sessions = FileSessions(self.path.with_name(self.path.name + ".sessions"))
        return self._sessions

    def wrong_keys(self) -> None:
        """None: each process counts wrong admin keys itself (server/throttle.py)."""
        return None

    def on_change(self, listener: ChangeListener) -> None:
        self._listeners.append(listener)

    def close(self) -> None:
        self._listeners.clear()

    def _notify(self, key: str) -> None:
        for listener in list(self._listeners):
            listener(key)

    def _remember(self, data: StoreData) -> None:
        with self._thread_lock:
            self._cache["data"] = data

    def _refresh(self) -> StoreData:
        data = self._read()
        self._remember(data)
        return data

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
            entries = doc.get("profiles") or {}
            recommendations = doc.get("recommendations") or {}
            if not isinstance(entries, dict) or not isinstance(recommendations, dict):
                raise ValueError("'profiles' and 'recommendations' must be objects")
        except ValueError as exc:
            return self._unusable(f"corrupt: {str(exc).splitlines()[0]}")
        self.problem = None
        profiles, invalid = read_entries(entries, self.location)
        return StoreData(profiles, {str(k): str(v) for k, v in recommendations.items()}, invalid)

    def _unusable(self, reason: str) -> StoreData:
        if reason != self.problem:  # once per problem, not once per cache refresh
            log.error("store_unusable", path=self.location, reason=reason, treated_as="empty")
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
            log.error("store_set_aside", path=self.location, reason=self.problem, moved_to=str(aside))
            self.problem = None
        return data

    def _write(self, data: StoreData) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_leftovers()
        tmp = self.path.parent / f".{self.path.name}.{secrets.token_hex(6)}.tmp"
        # Not mkstemp: its file is 0600, and the rename would impose that on the store. A new
        # store gets the umask's default mode (as any file the user creates); a replaced one
        # keeps the mode the operator gave it (readable by a dashboard's group, say).
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                with contextlib.suppress(FileNotFoundError):
                    os.fchmod(out.fileno(), stat.S_IMODE(os.stat(self.path).st_mode))
                json.dump(data.to_json(), out, indent=2, ensure_ascii=False)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _remove_leftovers(self) -> None:
        # Writers make temporary files only while holding the lock we hold now: any still here
        # belong to a writer that died mid-save.
        for leftover in self.path.parent.glob(f".{self.path.name}.*.tmp"):
            leftover.unlink(missing_ok=True)
            log.warning("store_temp_removed", path=str(leftover), reason="left by a writer that died mid-save")


def owner_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class FileCoordinator:
    """Leases as small JSON files in a folder next to the store, for processes on one host.

    Every operation holds one `flock`-based guard for a few microseconds; the kernel drops it when
    its holder dies, so a kill -9 never leaves the guard taken. A lease itself is a record with a
    wall-clock expiry: a holder killed mid-measurement stops renewing it, and once it has expired
    the next process takes the pair over (stale-lock recovery). Each record also keeps the pair's
    newest token, the token of the last admitted write, and the failure backoff.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.owner = owner_id()
        self._guard = FileLock(str(folder / ".guard"), timeout=30)

    def _path(self, name: str) -> Path:
        return self.folder / (hashlib.sha256(name.encode()).hexdigest()[:24] + ".json")

    def _read(self, name: str) -> dict[str, Any]:
        try:
            record = json.loads(self._path(name).read_text(encoding="utf-8"))
            return record if isinstance(record, dict) else {}
        except (OSError, ValueError):
            return {}  # absent, or torn by a crash: a fresh record (tokens restart only then)

    def _write(self, name: str, record: dict[str, Any]) -> None:
        record["name"] = name
        path = self._path(name)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, path)

    def _locked(self) -> FileLock:
        self.folder.mkdir(parents=True, exist_ok=True)
        return self._guard

    def acquire(self, name: str, ttl_s: float) -> Lease | None:
        with self._locked():
            record = self._read(name)
            if record.get("owner") and record.get("expires", 0) > time.time():
                return None
            if record.get("owner"):
                log.warning("lease_expired_taken_over", name=name, previous_owner=record["owner"])
            token = int(record.get("token", 0)) + 1
            record.update(owner=self.owner, token=token, expires=time.time() + ttl_s)
            self._write(name, record)
            return Lease(name, token, self.owner)

    def renew(self, lease: Lease, ttl_s: float) -> bool:
        with self._locked():
            record = self._read(lease.name)
            if record.get("owner") != lease.owner or record.get("token") != lease.token:
                return False
            record["expires"] = time.time() + ttl_s
            self._write(lease.name, record)
            return True

    def release(self, lease: Lease) -> None:
        with self._locked():
            record = self._read(lease.name)
            if record.get("owner") == lease.owner and record.get("token") == lease.token:
                record.update(owner=None, expires=0)
                self._write(lease.name, record)

    def admit(self, lease: Lease) -> bool:
        """May a write fenced by `lease` land? Not when a newer grant exists or a newer write landed."""
        with self._locked():
            record = self._read(lease.name)
            newest = int(record.get("token", 0))
            held_by_other = record.get("owner") and record.get("expires", 0) > time.time() and newest != lease.token
            if held_by_other or lease.token < newest or lease.token < int(record.get("written", 0)):
                log.warning("write_fenced_out", name=lease.name, token=lease.token, newest=newest)
                return False
            record["written"] = lease.token
            self._write(lease.name, record)
            return True

    def backoff_s(self, key: str) -> float:
        with self._locked():
            return max(0.0, float(self._read(key).get("notBefore", 0)) - time.time())

    def record_failure(self, key: str, base_s: float, max_s: float) -> tuple[int, float]:
        with self._locked():
            record = self._read(key)
            failures = int(record.get("failures", 0)) + 1
            delay = backoff_delay(failures, base_s, max_s)
            record.update(failures=failures, notBefore=time.time() + delay)
            self._write(key, record)
            return failures, delay

    def clear_failures(self, key: str) -> None:
        with self._locked():
            record = self._read(key)
            if record.get("failures"):
                record.update(failures=0, notBefore=0)
                self._write(key, record)


class FileSessions:
    """Signed-out console sessions in one small JSON file next to the store (`<store>.sessions`):
    `{"revoked": {session id: expiry}}`, written like the store (lock, re-read, replace)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = FileLock(str(path) + ".lock", timeout=30)

    def _read(self) -> dict[str, float]:
        try:
            doc = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Unreadable or torn: which sessions were signed out is unknown, so none is trusted.
            raise StoreError(f"{self.path}: cannot read signed-out sessions: {exc}") from None
        revoked = doc.get("revoked") if isinstance(doc, dict) else None
        if not isinstance(revoked, dict):
            raise StoreError(f"{self.path}: not a sessions file (expected {{'revoked': {{...}}}})")
        return {str(k): float(v) for k, v in revoked.items() if isinstance(v, (int, float))}

    def revoke(self, session_id: str, expires: float) -> None:
        try:
            with self._lock:
                now = time.time()
                revoked = {k: e for k, e in self._read().items() if e > now}  # the expired ones need no record
                revoked[session_id] = expires
                tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}.tmp")
                tmp.write_text(json.dumps({"revoked": revoked}), encoding="utf-8")
                os.replace(tmp, self.path)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot record a sign-out: {exc}") from None

    def revoked(self, session_id: str) -> bool:
        return self._read().get(session_id, 0.0) > time.time()
