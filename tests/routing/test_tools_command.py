"""`gatekeeper tools MODEL` says which requirement hides a tool, and where routing sends a request."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import make_profile, seed_store

from gatekeeper.rules.tiers import Tier


def run_tools(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "gatekeeper", "tools", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=os.environ | {"COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def rows(output: str) -> dict[str, str]:
    return {line.split("│")[1].strip(): line for line in output.splitlines() if line.count("│") >= 3}


CONFIG = """store: {store}
tools:
  required_tier: {{emit_invoice: medium, execute_command: large}}
  requires:
    emit_invoice: {{json: 0.9}}
routing:
  fallback: {{"m": [big]}}
"""


def test_the_tools_command_names_the_requirement_that_hides_a_tool(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(
        store,
        make_profile("m", Tier.MEDIUM, default_suite, score_intervals={"json": [0.82, 0.97]}),
        make_profile("big", Tier.LARGE, default_suite, score_intervals={"json": [0.95, 1.0]}),
    )
    config = tmp_path / "gk.yaml"
    config.write_text(CONFIG.format(store=store))
    out = run_tools("m", "--config", str(config))
    lines = rows(out)
    assert "medium; json >= 0.9" in lines["emit_invoice"]
    assert "hidden: json >= 0.9 (bound 0.820)" in lines["emit_invoice"]
    assert "hidden: tier medium < large" in lines["execute_command"]
    assert "goes to big@default (fallback, tier large)" in out
    assert "yes" in rows(run_tools("big", "--config", str(config)))["emit_invoice"]
