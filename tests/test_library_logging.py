"""Used in process as a library, gatekeeper writes nothing to stdout or stderr until the
application configures logging (its lines go to stdlib `logging`, as httpx's do); then they
arrive through the application's own handlers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# A store with one entry that is not a profile: reading it logs the warning `profile_skipped`.
PROGRAM = """
import sys
from gatekeeper import Gatekeeper, Settings, ToolRegistry


{setup}
settings = Settings(store=sys.argv[1], upstream={{"base_url": "http://127.0.0.1:9/v1"}})
with Gatekeeper(settings) as gk:
    registry = ToolRegistry(gk)
    print("tools:", registry.list_for_llm("some-model"))
"""


def run(tmp_path: Path, setup: str = "") -> subprocess.CompletedProcess[str]:
    store = tmp_path / "models_profile.json"
    store.write_text(json.dumps({"profiles": {"broken@default": {"model": "broken"}}, "recommendations": {}}))
    return subprocess.run(
        [sys.executable, "-c", PROGRAM.format(setup=setup), str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def test_an_application_that_configures_nothing_sees_no_log_line(tmp_path: Path) -> None:
    done = run(tmp_path)
    assert done.stdout.strip() == "tools: []"
    assert done.stderr == ""


def test_an_application_that_configures_logging_gets_the_lines(tmp_path: Path) -> None:
    done = run(tmp_path, "import logging; logging.basicConfig(level=logging.WARNING)")
    assert done.stdout.strip() == "tools: []"
    assert "WARNING:gatekeeper.store.base:" in done.stderr  # the logger of the module that logs it
    assert '"event": "profile_skipped"' in done.stderr
