"""The JSON profile store: seed format, atomic writes, concurrent writers, corrupt files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT, make_profile

from gatekeeper.errors import RequestInvalid, StoreError
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore
from gatekeeper.store.profile import profile_key, split_key


def test_file_is_in_the_seed_format(store_path, default_suite):
    JsonFileStore(store_path).save([make_profile("m", Tier.MEDIUM, default_suite, effort="low")], {"m": "low"})
    doc = json.loads(store_path.read_text())
    assert set(doc) == {"profiles", "recommendations"}
    assert doc["recommendations"] == {"m": "low"}
    profile = doc["profiles"]["m@low"]
    assert profile["tier"] == "medium" and profile["reasoningEffort"] == "low"
    assert profile["testsHash"] == default_suite.hash and profile["benchmarkVersion"] == default_suite.version


def test_profile_round_trips(store_path, default_suite):
    original = make_profile("m", Tier.LARGE, default_suite)
    JsonFileStore(store_path).save([original])
    assert JsonFileStore(store_path).get("m@default") == original


def test_keys_use_default_when_no_effort_and_split_on_the_last_at():
    assert profile_key("m", None) == "m@default"
    assert split_key("org/model@v2@low") == ("org/model@v2", "low")
    assert split_key("plain") == ("plain", "default")


def test_delete_removes_one_pair(store_path, default_suite):
    store = JsonFileStore(store_path)
    store.save([make_profile("m", Tier.LARGE, default_suite, effort=e) for e in ("low", "xhigh")])
    assert store.delete("m@low") is True
    assert store.delete("m@low") is False
    assert set(JsonFileStore(store_path).load().profiles) == {"m@xhigh"}


def test_corrupt_file_reads_as_empty_and_reading_moves_nothing(store_path):
    store_path.write_text('{"profiles": {"m@default": {"tier": "huge"')
    store = JsonFileStore(store_path)
    assert store.load().profiles == {}
    assert store.problem.startswith("corrupt")
    assert sorted(p.name for p in store_path.parent.iterdir()) == ["models_profile.json"]


def test_corrupt_file_is_set_aside_not_deleted_by_the_next_write(store_path, default_suite):
    store_path.write_text('{"profiles": {"m@default": {"tier": "huge"')
    store = JsonFileStore(store_path)
    store.save([make_profile("m", Tier.SMALL, default_suite)])
    aside = list(store_path.parent.glob("models_profile.json.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_text().startswith('{"profiles"')
    assert set(JsonFileStore(store_path).load().profiles) == {"m@default"}


def test_a_file_that_is_not_a_store_is_never_replaced(tmp_path, default_suite):
    other = tmp_path / "passwd"
    other.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(StoreError, match="not a profile store"):
        JsonFileStore(other).save([make_profile("m", Tier.SMALL, default_suite)])
    assert other.read_text().startswith("root:") and not list(tmp_path.glob("*.corrupt-*"))


def test_a_directory_is_not_a_store(tmp_path, default_suite):
    with pytest.raises(StoreError, match="is a directory"):
        JsonFileStore(tmp_path).save([make_profile("m", Tier.SMALL, default_suite)])
    assert tmp_path.is_dir()


def test_one_bad_entry_costs_only_itself(store_path, default_suite):
    good = [make_profile(m, Tier.LARGE, default_suite) for m in ("a", "b", "c")]
    doc = {"profiles": {p.key: p.to_json() for p in good}, "recommendations": {}}
    bad = {"model": "d", "tier": "gigantic"}
    doc["profiles"]["d@default"] = bad
    store_path.write_text(json.dumps(doc))
    store = JsonFileStore(store_path)
    assert set(store.load().profiles) == {"a@default", "b@default", "c@default"} and store.problem is None
    assert store.load().invalid == {"d@default": bad}


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.pop("benchmarkVersion"),
        lambda e: e.update(tier="huge"),
        lambda e: e.pop("scores"),
        lambda e: e.update(reasoningEffort="high"),  # stored under m@default: not what it measured
    ],
)
def test_a_bad_entry_is_skipped_and_kept_untouched_by_the_next_write(store_path, default_suite, change):
    entry = make_profile("m", Tier.LARGE, default_suite).to_json()
    change(entry)
    store_path.write_text(json.dumps({"profiles": {"m@default": entry}, "recommendations": {}}))
    store = JsonFileStore(store_path)
    assert store.get("m@default") is None
    store.save([make_profile("other", Tier.SMALL, default_suite)])
    doc = json.loads(store_path.read_text())
    assert doc["profiles"]["m@default"] == entry and "other@default" in doc["profiles"]
    assert not list(store_path.parent.glob("*.corrupt-*"))


def test_a_file_that_is_not_json_is_still_set_aside(store_path, default_suite):
    store_path.write_text("{ this is not json")
    JsonFileStore(store_path).save([make_profile("m", Tier.SMALL, default_suite)])
    assert len(list(store_path.parent.glob("models_profile.json.corrupt-*"))) == 1


def test_a_temp_file_left_by_a_killed_writer_is_removed_by_the_next_write(store_path, default_suite):
    writer = textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from conftest import make_profile
        from gatekeeper.store import JsonFileStore
        from gatekeeper.suite.loader import load_suite
        from gatekeeper.rules.tiers import Tier
        os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # die mid-save, temp file written
        JsonFileStore(sys.argv[1]).save([make_profile("m", Tier.SMALL, load_suite({str(ROOT / "benchmarks")!r}))])
    """)
    proc = subprocess.run([sys.executable, "-c", writer, str(store_path)], timeout=60)
    assert proc.returncode == -9
    assert len(list(store_path.parent.glob(".models_profile.json.*.tmp"))) == 1
    JsonFileStore(store_path).save([make_profile("n", Tier.SMALL, default_suite)])
    assert not list(store_path.parent.glob(".models_profile.json.*.tmp"))


def test_an_effort_containing_at_is_refused():
    with pytest.raises(RequestInvalid, match="contains '@'"):
        profile_key("m", "lo@w")


def test_writes_leave_no_temporary_files(store_path, default_suite):
    store = JsonFileStore(store_path)
    for tier in Tier:
        store.save([make_profile("m", tier, default_suite)])
    assert sorted(p.name for p in store_path.parent.iterdir()) == ["models_profile.json", "models_profile.json.lock"]


def test_two_processes_writing_at_once_lose_nothing(store_path):
    writer = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests")!r})
        from conftest import make_profile
        from gatekeeper.store import JsonFileStore
        from gatekeeper.suite.loader import load_suite
        from gatekeeper.rules.tiers import Tier
        suite = load_suite({str(ROOT / "benchmarks")!r})
        name = sys.argv[1]
        store = JsonFileStore(sys.argv[2], cache_ttl_s=0)
        for i in range(40):
            store.save([make_profile(f"{{name}}-{{i}}", Tier.SMALL, suite)], {{f"{{name}}-{{i}}": "low"}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, name, str(store_path)]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    data = JsonFileStore(store_path).load()
    assert len(data.profiles) == 80 and len(data.recommendations) == 80


def test_a_save_keeps_the_files_mode(store_path, default_suite):
    store = JsonFileStore(store_path)
    store.save([make_profile("m", Tier.SMALL, default_suite)])
    store_path.chmod(0o640)  # the operator's choice: readable by a dashboard's group
    store.save([make_profile("n", Tier.SMALL, default_suite)])
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o640
    store.delete("m@default")
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o640


def test_a_new_store_file_gets_the_umasks_default_mode(store_path, default_suite):
    previous = os.umask(0o022)
    try:
        JsonFileStore(store_path).save([make_profile("m", Tier.SMALL, default_suite)])
    finally:
        os.umask(previous)
    assert stat.S_IMODE(store_path.stat().st_mode) == 0o644
