"""The `gatekeeper` command: suite, profiles, tools, serve (as a real process)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import openai
import pytest
from conftest import ROOT, make_profile, measuring_upstream, seed_store, wait_serving
from scripted import ScriptedServer, free_port

from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore
from gatekeeper.suite.loader import suite_hash


def gk(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("env", os.environ | {"COLUMNS": "200"})
    return subprocess.run(
        [sys.executable, "-m", "gatekeeper", *args], capture_output=True, text=True, timeout=timeout, **kwargs
    )


def test_suite_validate_accepts_the_default_suite():
    done = gk("suite", "validate", str(ROOT / "benchmarks"))
    assert done.returncode == 0, done.stderr
    assert suite_hash(ROOT / "benchmarks") in done.stdout


def test_suite_validate_names_the_bad_file_and_why(tmp_path):
    (tmp_path / "10_ok.json").write_text(
        json.dumps({"name": "a", "category": "json", "prompt": "p", "checks": [{"type": "json_valid"}]})
    )
    (tmp_path / "20_bad.json").write_text(
        json.dumps({"name": "b", "category": "json", "prompt": "p", "checks": [{"type": "telepathy"}]})
    )
    done = gk("suite", "validate", str(tmp_path))
    assert done.returncode == 1
    assert "20_bad.json" in done.stderr and "telepathy" in done.stderr


def test_suite_hash_prints_eight_hex_chars():
    done = gk("suite", "hash", str(ROOT / "benchmarks"))
    assert done.returncode == 0 and done.stdout.strip() == suite_hash(ROOT / "benchmarks")
    assert len(done.stdout.strip()) == 8


def test_suite_hash_of_a_folder_without_tests_is_an_error(tmp_path):
    (tmp_path / "notes.txt").write_text("not a test")
    done = gk("suite", "hash", str(tmp_path))
    assert done.returncode == 1 and done.stdout == ""
    assert "no *.json test files" in done.stderr


def test_profiles_json_prints_the_store(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    done = gk("profiles", "--store", str(store), "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["profiles"]["m@default"]["tier"] == "medium"
    table = gk("profiles", "--store", str(store))
    assert "m@default" in table.stdout and "medium" in table.stdout


def test_profiles_show_the_tool_budget_and_a_dash_where_none_was_measured(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(
        store,
        make_profile("budgeted", Tier.MEDIUM, default_suite, tool_budget=16),
        make_profile("unbudgeted", Tier.MEDIUM, default_suite),
    )
    table = gk("profiles", "--store", str(store)).stdout
    rows = {line.split()[1]: line for line in table.splitlines() if "@default" in line}
    assert "tool budget" in table
    assert " 16 " in rows["budgeted@default"] and " - " in rows["unbudgeted@default"]


def test_profiles_refuses_a_file_that_is_not_a_store_and_leaves_it_alone(tmp_path):
    other = tmp_path / "notes.txt"
    other.write_text("root:x:0:0:root:/root:/bin/bash\n")
    done = gk("profiles", "--store", str(other))
    assert done.returncode == 1 and "not a usable profile store" in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_tools_command_lists_what_a_model_gets(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    config = tmp_path / "gk.yaml"
    config.write_text(f"store: {store}\ntools:\n  required_tier:\n    execute_command: large\n    write_file: medium\n")
    done = gk("tools", "m", "--config", str(config))
    assert done.returncode == 0, done.stderr
    lines = {line.split("│")[1].strip(): line for line in done.stdout.splitlines() if line.count("│") >= 3}
    assert "hidden" in lines["execute_command"] and "yes" in lines["write_file"]


@contextmanager
def serving(config) -> Iterator[tuple[int, subprocess.Popen, list[str]]]:
    """`gatekeeper serve --config CONFIG` on a free port until the block ends (then SIGINT); the
    list it yields holds the process's stderr once it has stopped."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    try:
        wait_serving(f"http://127.0.0.1:{port}/healthz", proc, timeout_s=20)
        yield port, proc, said
    finally:
        proc.send_signal(signal.SIGINT)
        said.append(proc.communicate(timeout=20)[1])


def test_serve_runs_a_real_proxy_process_and_stops_cleanly(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.SMALL, default_suite))
    with ScriptedServer() as upstream:
        config = tmp_path / "gk.yaml"
        config.write_text(
            f"upstream:\n  base_url: {upstream.base_url}\nstore: {store}\n"
            "tools:\n  required_tier:\n    execute_command: large\n"
        )
        with serving(config) as (port, proc, said):
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
            raw = client.chat.completions.with_raw_response.create(
                model="m",
                messages=[{"role": "user", "content": "hi"}],
                tools=[
                    {"type": "function", "function": {"name": n, "parameters": {}}}
                    for n in ("read_file", "execute_command")
                ],
            )
            assert raw.headers["x-gatekeeper-tier"] == "small"
            assert [t["function"]["name"] for t in upstream.requests[-1]["tools"]] == ["read_file"]
    err = said[0]
    assert proc.returncode == 0, err
    request_lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    logged = next(line for line in request_lines if line.get("event") == "request")
    assert logged["tools_hidden"] == ["execute_command"] and logged["tier"] == "small"
    assert {"request_id", "model", "effort", "source", "upstream_status", "latency_ms"} <= set(logged)


def test_serve_rejects_a_bad_config_at_start(tmp_path):
    config = tmp_path / "gk.yaml"
    config.write_text("unknown_models: sometimes\n")
    done = gk("serve", "--config", str(config), env=os.environ | {"NO_COLOR": "1", "COLUMNS": "200"})
    assert done.returncode != 0 and "unknown_models" in done.stderr


def test_bench_and_tools_refuse_an_effort_outside_the_closed_set(tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\nupstream: {{base_url: "http://127.0.0.1:9/v1"}}\n')
    for args in (["bench", "m", "--effort", "low,e5"], ["tools", "m", "--effort", "e5"]):
        done = gk(*args, "--config", str(config))
        assert done.returncode != 0 and "--effort" in done.stderr and "'e5'" in done.stderr, done.stderr
    assert not (tmp_path / "p.json").exists()  # nothing was measured


# -- what the CLI prints is shown as written (issue 43): rich markup is never read from data --------

BRACKETED = "evil[/x]model[bold]"


def refusing_backend():
    """A backend that answers every call 401 (the bench fails at once, no retries)."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def refuse(request):
        return JSONResponse({"error": {"message": "no key [/nope]", "type": "auth"}}, status_code=401)

    from scripted import ThreadedServer

    return ThreadedServer(Starlette(routes=[Route("/v1/{path:path}", refuse, methods=["GET", "POST"])]))


def test_bench_prints_a_bracketed_model_name_as_written_and_does_not_crash(tmp_path):
    with refusing_backend() as backend:
        done = gk(
            "bench",
            BRACKETED,
            "--effort",
            "default",
            "--base-url",
            f"http://127.0.0.1:{backend.port}/v1",
            "--store",
            str(tmp_path / "p.json"),
        )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "MarkupError" not in done.stderr
    assert f"error: {BRACKETED}: backend failed" in done.stderr
    assert "no key [/nope]" in done.stderr  # the backend's own words, brackets and all


def test_the_redis_extra_hint_prints_the_extra_in_brackets(tmp_path):
    # The redis client hidden, as in an install without the extra.
    config = tmp_path / "gatekeeper.yaml"
    config.write_text('store: "redis://127.0.0.1:9/0"\nupstream: {base_url: "http://127.0.0.1:9/v1"}\n')
    for command in (["profiles", "--store", "redis://127.0.0.1:9/0"], ["serve", "--config", str(config)]):
        script = (
            f"import sys; sys.modules['redis'] = None; sys.argv = ['gatekeeper', *{command!r}]; "
            "from gatekeeper.cli import main; main()"
        )
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert "error: store: a Redis store needs the redis extra: pip install 'gatekeeper[redis]'" in done.stderr, (
            command,
            done.stderr,
        )
        assert "Traceback" not in done.stderr


def test_tools_and_profiles_show_bracketed_names_paths_and_patterns_as_written(tmp_path, default_suite):
    folder = tmp_path / "[red]store[b]"
    folder.mkdir()
    store = folder / "p.json"
    seed_store(store, make_profile(BRACKETED, Tier.MEDIUM, default_suite))
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(
        f'store: "{store}"\nupstream: {{base_url: "http://127.0.0.1:9/v1"}}\n'
        'tools:\n  required_tier:\n    "write_[a-z]*": large\n    "[/i]odd": small\n'
    )
    done = gk("tools", BRACKETED, "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert f"{BRACKETED}@default: tier medium (measured)" in done.stdout
    assert "write_[a-z]*" in done.stdout and "[/i]odd" in done.stdout
    listed = gk("profiles", "--store", str(store))
    assert listed.returncode == 0, listed.stderr
    assert f"{BRACKETED}@default" in listed.stdout
    missing = gk("suite", "validate", str(folder / "[/nope]"))
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "[red]store[b]" in missing.stderr and "[/nope]" in missing.stderr, missing.stderr


# -- ... nor emoji codes, nor control characters, nor a malformed URL ---------------------------

SMILE = "a:smile:b"  # rich's emoji codes: `:smile:` would print as 😄
FINE_TUNE = "ft:gpt-4o-mini:acme:robot:9o1eNlSa"  # a real fine-tune id: `:robot:` would print as 🤖
CONTROL = "ctl\rX\x1b[31mRED\x07"  # \r and BEL dropped by rich, ESC a colour on the terminal
CONTROL_SHOWN = "ctl\\u000dX\\u001b[31mRED\\u0007"


def no_emoji(text: str) -> bool:
    return "\N{SMILING FACE WITH OPEN MOUTH AND SMILING EYES}" not in text and "\N{ROBOT FACE}" not in text


def test_profiles_show_emoji_codes_in_model_names_as_written(tmp_path, default_suite):
    store = tmp_path / "p.json"
    profiles = [make_profile(m, Tier.MEDIUM, default_suite, effort="low") for m in (SMILE, FINE_TUNE)]
    JsonFileStore(store).save(profiles, {SMILE: "low", FINE_TUNE: "low"})
    done = gk("profiles", "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert f" {SMILE}@low " in done.stdout and f" {FINE_TUNE}@low " in done.stdout
    assert f"recommended effort for {SMILE}: low" in done.stdout
    assert f"recommended effort for {FINE_TUNE}: low" in done.stdout
    assert no_emoji(done.stdout)


def test_profiles_escape_control_characters_in_model_names(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile(CONTROL, Tier.MEDIUM, default_suite))
    done = gk("profiles", "--store", str(store))
    assert done.returncode == 0, done.stderr
    assert f" {CONTROL_SHOWN}@default " in done.stdout
    assert not any(c in done.stdout for c in "\r\x1b\x07")


def test_bench_prints_emoji_codes_and_control_characters_in_model_names_as_written(tmp_path, default_suite):
    store = tmp_path / "p.json"
    with measuring_upstream(default_suite, models=(FINE_TUNE,)) as upstream:
        config = tmp_path / "gatekeeper.yaml"
        config.write_text(
            f'store: "{store}"\nupstream: {{base_url: "{upstream.base_url}"}}\n'
            "bench: {risk: 1, max_retries: 0, retry_after_s: 0.1, timeout_s: 20}\n"
        )
        done = gk("bench", FINE_TUNE, CONTROL, "--config", str(config), "--effort", "default", "--samples", "1")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    for shown in (FINE_TUNE, CONTROL_SHOWN):
        assert shown in [line.strip() for line in lines]  # the table's title
        assert any(line.startswith(f"{shown}@default: certified large") for line in lines)
        # `default` sends no effort field, so it is never a recommendation: said, not "None"
        assert f"no effort recommended for {shown}: no explicit level was measured" in lines
        assert f"{shown}@default" in done.stderr  # the progress lines
    assert "None" not in done.stdout
    assert no_emoji(done.stdout + done.stderr)
    assert not any(c in done.stdout + done.stderr for c in "\r\x07") and "\x1b[31m" not in done.stdout


def test_bench_warning_is_styled_not_printed_as_markup_tags(capsys, default_suite):
    from types import SimpleNamespace

    from gatekeeper.cli import _print_results
    from gatekeeper.measuring.runner import RunSettings
    from gatekeeper.measuring.service import ModelResult

    profile = make_profile(FINE_TUNE, Tier.LARGE, default_suite, effort="low")
    result = ModelResult(FINE_TUNE, [profile], recommended="low", uneven_errors={"low": "retries [/x] :smile:"})
    _print_results([result], SimpleNamespace(run_settings=RunSettings))  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert f"warning {FINE_TUNE}@low: retries [/x] :smile:" in out.splitlines()
    assert "[yellow]" not in out and no_emoji(out)


def test_tools_show_each_pattern_rule_with_its_own_tier_and_minimums(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile(FINE_TUNE, Tier.MEDIUM, default_suite))
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(
        f'store: "{store}"\nupstream: {{base_url: "http://127.0.0.1:9/v1"}}\n'
        'tools:\n  required_tier: {"tool[ab]*": large, "files[0]": medium, "say:smile:": large}\n'
        '  requires: {"x[bold]y": {json: 0.5}}\n'
    )
    done = gk("tools", FINE_TUNE, "--config", str(config))
    assert done.returncode == 0, done.stderr
    assert f"{FINE_TUNE}@default: tier medium (measured)" in done.stdout
    rows = {
        cells[0]: cells[1:]
        for line in done.stdout.splitlines()
        if len(cells := [c.strip() for c in line.split("│")[1:-1]]) == 3
    }
    assert rows["tool[ab]*"] == ["large", "hidden: tier medium < large"]
    assert rows["files[0]"] == ["medium", "yes"]
    assert rows["say:smile:"] == ["large", "hidden: tier medium < large"]
    assert rows["x[bold]y"] == ["small; json >= 0.5", "hidden: json >= 0.5 (not measured)"]
    assert no_emoji(done.stdout)


def test_a_config_key_spelled_like_pydantics_key_marker_is_named_in_the_error(tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text('tools:\n  required_tier: {"[key]": bogus}\n  requires: {1: {json: 0.5}}\n')
    done = gk("tools", "m", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "tools.required_tier.[key]: Input should be 'small', 'medium' or 'large', got 'bogus'" in done.stderr
    assert "tools.requires.1: Input should be a valid string" in done.stderr  # a bad key: its marker dropped


def test_a_malformed_store_url_is_an_error_line_without_its_password(tmp_path):
    done = gk("profiles", "--store", "redis://h:9[/x]/0")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr == "error: redis://h:9[/x]/0: not a usable store location: Invalid IPv6 URL\n"
    copied = gk("store", "copy", "redis://:p[/x]@127.0.0.1:9/0", str(tmp_path / "out.json"))
    assert copied.returncode == 1 and "Traceback" not in copied.stderr
    assert copied.stderr == "error: redis://***@127.0.0.1:9/0: not a usable store location: Invalid IPv6 URL\n"
    assert not (tmp_path / "out.json").exists()


def test_bench_refuses_a_malformed_base_url_before_any_work(tmp_path):
    done = gk(
        "bench", "m", "--effort", "default", "--store", str(tmp_path / "p.json"), "--base-url", "http://h:99999[/x]/v1"
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == "error: --base-url http://h:99999[/x]/v1: not a valid URL: Invalid port: '99999['\n"
    assert not (tmp_path / "p.json").exists()


def answering_proxy(body: str, media_type: str = "application/json"):
    """A server answering `GET /admin/drift` 200 with `body`."""
    from scripted import ThreadedServer
    from starlette.applications import Starlette
    from starlette.responses import Response
    from starlette.routing import Route

    async def drift(request):
        return Response(body, media_type=media_type)

    return ThreadedServer(Starlette(routes=[Route("/admin/drift", drift)]))


def test_profiles_proxy_refuses_a_malformed_url_a_missing_key_and_an_answer_that_is_not_json(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    env = {k: v for k, v in os.environ.items() if k != "GATEKEEPER_ADMIN_KEY"} | {"COLUMNS": "200"}
    malformed = gk("profiles", "--store", str(store), "--proxy", "http://h:99999[/x]", "--admin-key", "k", env=env)
    assert malformed.returncode == 1 and "Traceback" not in malformed.stderr
    assert malformed.stderr == "error: --proxy http://h:99999[/x]: not a valid URL: Invalid port: '99999['\n"
    schemeless = gk("profiles", "--store", str(store), "--proxy", "127.0.0.1:9", "--admin-key", "k", env=env)
    assert schemeless.returncode == 1 and "cannot reach" not in schemeless.stderr
    assert schemeless.stderr.startswith("error: --proxy 127.0.0.1:9: not a valid URL: give http://HOST:PORT")
    keyless = gk("profiles", "--store", str(store), "--proxy", "http://127.0.0.1:9", env=env)
    assert keyless.returncode == 1 and "Illegal header" not in keyless.stderr
    assert keyless.stderr.startswith("error: --proxy http://127.0.0.1:9: the proxy's admin API needs its admin key")
    with answering_proxy("<html>[/x] not json</html>", "text/html") as other:
        url = f"http://u:secret@127.0.0.1:{other.port}"
        done = gk("profiles", "--store", str(store), "--proxy", url, "--admin-key", "k", env=env)
    assert done.returncode == 1 and "Traceback" not in done.stderr and "secret" not in done.stderr
    assert done.stderr.startswith(
        f"error: http://***@127.0.0.1:{other.port}/admin/drift: not a gatekeeper admin API answer"
    )


def test_profiles_proxy_drift_table_shows_pair_keys_and_reasons_as_written(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile(FINE_TUNE, Tier.MEDIUM, default_suite))
    pair = {
        "tier": "small",
        "source": "drift",
        "window": {"calls": 3},
        "rates": {"notOffered": {"count": 2, "score": 1.5, "threshold": 1.0, "ceiling": None}},
        "demoted": {"fromTier": "medium", "toTier": "small", "reason": "json [/x] :smile: \x1b[31mred"},
        "drifting": True,
    }
    with answering_proxy(json.dumps({"pairs": {f"{FINE_TUNE}@default": pair}})) as proxy:
        done = gk("profiles", "--store", str(store), "--proxy", f"http://127.0.0.1:{proxy.port}", "--admin-key", "k")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if "demoted" in line)
    assert f" {FINE_TUNE}@default " in row
    assert "demoted medium -> small for everyone: json [/x] :smile: \\u001b[31mred" in row
    assert no_emoji(done.stdout) and "\x1b" not in done.stdout


def test_serve_start_line_shows_the_upstream_url_as_written_without_its_password(tmp_path):
    config = tmp_path / "gatekeeper.yaml"
    config.write_text(
        f'store: "{tmp_path / "p.json"}"\nupstream: {{base_url: "http://u:secret@127.0.0.1:9/:robot:/v1"}}\n'
    )
    with serving(config) as (port, _, said):
        pass
    err = said[0]
    assert f"gatekeeper serving on http://127.0.0.1:{port}/v1 -> http://***@127.0.0.1:9/:robot:/v1" in err.splitlines()
    assert "secret" not in err and no_emoji(err)


def test_serve_refuses_a_port_out_of_range_instead_of_listening_elsewhere(tmp_path):
    # 99999 was passed to the socket as 99999 % 65536: the proxy served on 34463 and said 99999.
    for port in ("99999", "-1", "0"):
        done = gk("serve", "--port", port, timeout=20, cwd=tmp_path)
        assert done.returncode == 2, (port, done.stderr)
        assert done.stderr == f"error: --port must be 1 to 65535, got {port}\n"


def test_serve_refuses_a_proxy_it_cannot_use_before_it_starts(tmp_path):
    config = tmp_path / "gk.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\nupstream:\n  base_url: https://api.example/v1\n')
    env = os.environ | {"COLUMNS": "200", "HTTPS_PROXY": "socks5://user:hunter22@127.0.0.1:1080"}
    with socket.create_server(("127.0.0.1", 0)) as taken:  # so that a serve that gets past it stops at the port
        port = str(taken.getsockname()[1])
        done = gk("serve", "--config", str(config), "--port", port, env=env, timeout=20)
        listed = gk("serve", "--config", str(config), "--port", port, env=env | {"NO_PROXY": "api.example"}, timeout=20)
    assert done.returncode == 2 and "gatekeeper serving" not in done.stderr and "hunter22" not in done.stderr
    assert done.stderr.startswith("error: HTTPS_PROXY=socks5://***@127.0.0.1:1080: only an http:// proxy is supported")
    assert listed.returncode == 2 and "cannot listen" in listed.stderr  # bypassed by name: as far as the port


def test_serve_names_the_address_it_cannot_listen_on(tmp_path):
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = gk("serve", "--config", str(tmp_path / "none.yaml"), "--port", str(port), timeout=20)
        assert done.returncode == 2 and "Traceback" not in done.stderr
        config = tmp_path / "gk.yaml"
        config.write_text(f'store: "{tmp_path / "p.json"}"\n')
        done = gk("serve", "--config", str(config), "--port", str(port), timeout=20)
    assert done.returncode == 2 and "gatekeeper serving" not in done.stderr
    assert done.stderr.startswith(f"error: --host 127.0.0.1 --port {port}: cannot listen: ")
    unknown = gk("serve", "--config", str(config), "--host", "no-such-host.invalid", "--port", str(port), timeout=20)
    assert unknown.returncode == 2 and unknown.stderr.startswith(f"error: --host no-such-host.invalid --port {port}: ")


def test_profiles_proxy_refuses_an_admin_key_a_header_cannot_carry_without_printing_it(tmp_path):
    store = tmp_path / "p.json"
    store.write_text('{"profiles": {}}')
    for key in ("clé-secrète", "top\nsecret"):
        done = gk("profiles", "--store", str(store), "--proxy", "http://127.0.0.1:9", "--admin-key", key)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "secr" not in done.stderr and "cannot reach" not in done.stderr
        assert done.stderr.startswith("error: the admin key: ")


def test_store_copy_refuses_the_same_store_and_a_missing_source_file(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    before = store.read_bytes()
    same = gk("store", "copy", str(store), str(tmp_path / "." / "p.json"))
    assert same.returncode == 1 and same.stdout == ""
    assert same.stderr.startswith("error: ") and "the same store" in same.stderr
    assert store.read_bytes() == before
    missing = gk("store", "copy", str(tmp_path / "typo.json"), str(tmp_path / "out.json"))
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == f"error: {tmp_path / 'typo.json'}: no such store file\n"
    assert not (tmp_path / "out.json").exists()  # no empty store made from a mistyped path


def test_store_copy_names_a_target_it_cannot_write(tmp_path, default_suite):
    store = tmp_path / "p.json"
    seed_store(store, make_profile("m", Tier.MEDIUM, default_suite))
    target = store / "copy.json"  # under a file, not a directory
    done = gk("store", "copy", str(store), str(target))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"error: {target}: cannot write: ")


def test_tools_file_entries_that_are_not_tools_are_named(tmp_path):
    config = tmp_path / "gk.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\n')
    cases = {
        '{"x": 1}': "expected a JSON array of OpenAI tools",
        '[{"type": "function", "function": {}}]': "[0].function.name: expected a tool name (a string)",
        '[{"type": "function", "function": {"name": "a"}}, {"function": {"name": 5}}]': "[1].function.name",
        '["a"]': "[0]: expected an object with 'function'",
    }
    for text, said in cases.items():
        tools_file = tmp_path / "tools.json"
        tools_file.write_text(text)
        done = gk("tools", "m", "--config", str(config), "--tools", str(tools_file))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"error: {tools_file}") and said in done.stderr, done.stderr
        assert done.stdout == ""


def test_tools_refuses_a_store_it_cannot_read_rather_than_answer_unmeasured(tmp_path):
    corrupt = tmp_path / "p.json"
    corrupt.write_text('{"profiles": ')
    config = tmp_path / "gk.yaml"
    config.write_text(f'store: "{corrupt}"\n')
    done = gk("tools", "m", "--config", str(config))
    assert done.returncode == 1 and "unmeasured" not in done.stdout
    assert f"error: {corrupt}: not a usable profile store (corrupt: " in done.stderr
    config.write_text('store: "redis://:hunter2@127.0.0.1:9/0"\n')
    down = gk("tools", "m", "--config", str(config))
    assert down.returncode == 1 and "unmeasured" not in down.stdout and "hunter2" not in down.stderr
    assert "error: redis://***@127.0.0.1:9/0: Redis unavailable" in down.stderr


def test_tools_names_a_missing_suite_directory(tmp_path):
    config = tmp_path / "gk.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\nsuite: "{tmp_path / "nosuite"}"\n')
    done = gk("tools", "m", "--config", str(config))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr == f"error: {tmp_path / 'nosuite'}: not a directory\n"


def test_profiles_says_when_the_store_file_does_not_exist(tmp_path):
    done = gk("profiles", "--store", str(tmp_path / "typo.json"), "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["profiles"] == {}
    assert done.stderr == f"note: {tmp_path / 'typo.json'}: no such store file yet (nothing measured there)\n"
    assert not (tmp_path / "typo.json").exists()


@pytest.mark.parametrize("after_s", [0.0, 0.05, 0.2])
def test_serve_stops_cleanly_on_ctrl_c_while_it_starts(tmp_path, after_s):
    """Ctrl-C right after the start line lands while the app is built, before uvicorn's own
    handler is in place: a clean stop (exit 0, no traceback), never a KeyboardInterrupt that a
    finalizer could swallow (the server would then start and never stop)."""
    config = tmp_path / "gk.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--port", str(free_port())],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert proc.stderr.readline().startswith("gatekeeper serving on ")
        time.sleep(after_s)
    finally:
        proc.send_signal(signal.SIGINT)
        said = proc.communicate(timeout=20)[1]
    assert proc.returncode == 0 and "Traceback" not in said, said


def test_serve_start_line_puts_an_ipv6_host_in_brackets(tmp_path):
    import socket

    try:
        socket.create_server(("::1", 0), family=socket.AF_INET6).close()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    config = tmp_path / "gk.yaml"
    config.write_text(f'store: "{tmp_path / "p.json"}"\n')
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gatekeeper", "serve", "--config", str(config), "--host", "::1", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert line.startswith(f"gatekeeper serving on http://[::1]:{port}/v1 -> "), line
