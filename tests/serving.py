"""`gatekeeper serve` as a real process on a real port, with its log (JSON lines) kept in a file;
and a real LiteLLM proxy with gatekeeper's hook (`litellm_served`).

For what only the real command shows: its configured log pipeline (what reaches the log file
from a hostile request), a restart, several replicas sharing one store.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT, wait_serving
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


@contextmanager
def litellm_served(
    config: dict[str, Any], upstream_url: str, store: Path, workdir: Path, timeout_s: float = 120
) -> Iterator[tuple[str, str]]:
    """examples/litellm_hook.md's start command: LiteLLM's proxy with the litellm `config`
    (examples/litellm_config.yaml, edited by the test) and gatekeeper's hook on
    examples/gatekeeper.yaml, over `upstream_url` and the profile `store`. Yields its URL and
    master key."""
    (workdir / "litellm_config.yaml").write_text(yaml.safe_dump(config))
    key = f"sk-{secrets.token_hex(32)}"
    port = free_port()
    env = os.environ | {
        "LITELLM_MASTER_KEY": key,
        "GATEKEEPER_CONFIG": "examples/gatekeeper.yaml",
        "GATEKEEPER_UPSTREAM": upstream_url,
        "GATEKEEPER_STORE": str(store),
        "PYTHONPATH": str(ROOT),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    litellm = Path(sys.executable).parent / "litellm"
    log = workdir / "log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [str(litellm), "--config", str(workdir / "litellm_config.yaml"), "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_serving(f"{url}/health/liveliness", process, timeout_s=timeout_s, log=log.read_text)
            yield url, key
        finally:
            process.terminate()
            process.wait(timeout=30)


@contextmanager
def litellm_example(tmp: Path, suite: Any, responder: Any) -> Iterator[tuple[str, str, Any]]:
    """examples/litellm_config.yaml's LiteLLM proxy with gatekeeper's hook, `local-model` measured
    small, in front of a NativeServer answering with `responder`: (url, key, the upstream)."""
    from conftest import make_profile, seed_store
    from upstreams import NativeServer

    from gatekeeper.rules.tiers import Tier

    store = tmp / "models_profile.json"
    seed_store(store, make_profile("local-model", Tier.SMALL, suite))
    with NativeServer(responder) as server:
        config = yaml.safe_load((ROOT / "examples/litellm_config.yaml").read_text())
        config["model_list"][0]["litellm_params"]["api_base"] = server.base_url
        with litellm_served(config, server.base_url, store, tmp, timeout_s=180) as (url, key):
            yield url, key, server
