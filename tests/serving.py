"""`gatekeeper serve` as a real process on a real port, with its log (JSON lines) kept in a file.

For what only the real command shows: its configured log pipeline (what reaches the log file
from a hostile request), a restart, several replicas sharing one store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from conftest import wait_serving
from scripted import free_port

import gatekeeper

CODE = Path(gatekeeper.__file__).resolve().parent.parent  # the process runs the code the tests import


@dataclass
class Served:
    url: str
    log: Path
    process: subprocess.Popen[bytes]

    def log_text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def served(config: str, workdir: Path) -> Iterator[Served]:
    """Run `gatekeeper serve` with the YAML `config` until the block ends (SIGTERM, then wait)."""
    port = free_port()
    path = workdir / f"gatekeeper-{port}.yaml"
    path.write_text(config, encoding="utf-8")
    log = workdir / f"serve-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "gatekeeper", "serve", "--config", str(path), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=os.environ | {"PYTHONPATH": str(CODE)},
            cwd=workdir,
        )
        running = Served(f"http://127.0.0.1:{port}", log, process)
        try:
            wait_serving(running.url + "/healthz", process, log=running.log_text)
            yield running
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
