"""scripts/drift_live.py, shortened: the real proxy, official openai clients, a scripted upstream
whose fault rates change over time (seeded), default drift settings."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "drift_live.py"
spec = importlib.util.spec_from_file_location("drift_live", SCRIPT)
assert spec is not None and spec.loader is not None
drift_live = importlib.util.module_from_spec(spec)
sys.modules["drift_live"] = drift_live
spec.loader.exec_module(drift_live)


def test_a_healthy_model_at_nine_tenths_of_its_ceilings_is_never_served_demoted() -> None:
    figures = drift_live.healthy(800)
    assert sum(figures["faults"].values()) > 10  # it did make mistakes
    assert figures["served_demoted"] == 0


def test_a_fault_at_five_times_the_ceiling_demotes_stays_while_it_lasts_and_clean_traffic_restores() -> None:
    figures = drift_live.fault(before=200, during=600, clean_max=2000)
    assert figures["demoted_before_fault"] == 0
    assert figures["calls_to_demotion"] is not None and figures["calls_to_demotion"] <= 400
    assert figures["large_after_demotion_while_faulty"] == 0 and figures["faulty_answers_after_demotion"] > 100
    assert figures["clean_calls_to_large"] is not None


def test_one_client_alone_demotes_the_model_only_for_itself() -> None:
    figures = drift_live.alone(800)
    assert figures["attacker_served_demoted"] > 0
    assert figures["others_served_demoted"] == 0 and not figures["demoted_for_everyone"]
