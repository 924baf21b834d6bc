"""The JSON profile store: seed format, atomic writes, concurrent writers, corrupt files."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, make_profile
from gatekeeper.errors import StoreError
from gatekeeper.profiles import JsonFileStore, profile_key, split_key
from gatekeeper.tiers import Tier


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


def test_a_profile_with_bad_fields_counts_as_corrupt(store_path):
    store_path.write_text(json.dumps({"profiles": {"m@default": {"model": "m", "tier": "gigantic"}}}))
    store = JsonFileStore(store_path)
    assert store.load().profiles == {} and store.problem


def test_writes_leave_no_temporary_files(store_path, default_suite):
    store = JsonFileStore(store_path)
    for tier in Tier:
        store.save([make_profile("m", tier, default_suite)])
    assert sorted(p.name for p in store_path.parent.iterdir()) == ["models_profile.json", "models_profile.json.lock"]


def test_two_processes_writing_at_once_lose_nothing(store_path):
    writer = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from conftest import make_profile
        from gatekeeper.profiles import JsonFileStore
        from gatekeeper.suite import load_suite
        from gatekeeper.tiers import Tier
        suite = load_suite({str(ROOT / 'benchmarks')!r})
        name = sys.argv[1]
        store = JsonFileStore(sys.argv[2], cache_ttl_s=0)
        for i in range(40):
            store.save([make_profile(f"{{name}}-{{i}}", Tier.SMALL, suite)], {{f"{{name}}-{{i}}": "low"}})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", writer, name, str(store_path)]) for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    data = JsonFileStore(store_path).load()
    assert len(data.profiles) == 80 and len(data.recommendations) == 80
