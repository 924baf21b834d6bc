"""`gatekeeper serve` re-reads its config on SIGHUP; a bad file is refused and the old one stays."""

from __future__ import annotations

import signal

import pytest
from conftest import wait_until
from scripted import ScriptedServer
from test_replicas import Replica


def write(config, upstream: ScriptedServer, tier: str) -> None:
    config.write_text(f'upstream: {{base_url: "{upstream.base_url}"}}\nstore: s.json\npins: {{m: {tier}}}\n')


def tier_of(replica: Replica) -> str:
    return replica.ask("m").headers["x-gatekeeper-tier"]


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP on this platform")
def test_sighup_reloads_pins_and_a_bad_config_keeps_the_old(tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    with ScriptedServer() as upstream:
        write(config, upstream, "small")
        replica = Replica(config, tmp_path)
        try:
            replica.wait_ready()
            assert tier_of(replica) == "small"
            write(config, upstream, "large")
            replica.proc.send_signal(signal.SIGHUP)
            wait_until(lambda: tier_of(replica) == "large", "SIGHUP to reload the config")
            write(config, upstream, "enormous")
            replica.proc.send_signal(signal.SIGHUP)
            log = tmp_path / replica.log.name.rsplit("/", 1)[-1]
            wait_until(lambda: "config_reload_refused" in log.read_text(), "the bad config to be refused")
            assert "pins.m" in log.read_text()
            assert tier_of(replica) == "large"
        finally:
            replica.stop()
