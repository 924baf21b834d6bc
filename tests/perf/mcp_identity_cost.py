"""What MCP server identity costs request gating. Not a test: run it by hand.

    python tests/perf/mcp_identity_cost.py [--number 2000] [--repeat 15]

Times the Responses and Messages codecs' `gate` on one request offering an MCP server with a
four-tool `allowed_tools` list and two function tools (a fresh copy of the body per call, the copy
timed alone and subtracted), under `github.delete_*: large` at tier small, for three labels: the
named `github`, a renamed `gh` (gated as possibly any server) and `gh` bound by its URL through
`tools.mcp_servers`. Prints microseconds per gate: the fastest of `--repeat` rounds (the round
least disturbed on a shared machine) and the median. Run from a checkout: the bound arm is left out
where gatekeeper has no `gatekeeper.rules.mcp_identity` (to compare with an older commit).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import timeit
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gatekeeper.protocols.messages.codec import CODEC as MESSAGES
from gatekeeper.protocols.responses.codec import CODEC as RESPONSES
from gatekeeper.rules.tiers import Tier
from gatekeeper.rules.tools import ToolPolicy

URL = "https://api.githubcopilot.com/mcp/"
TOOLS = ["delete_repo", "list_repos", "get_issue", "create_issue"]
RULES = {"github.delete_*": Tier.LARGE, "execute_command": Tier.LARGE}


def responses_body(label: str) -> dict[str, Any]:
    functions = [{"type": "function", "name": n, "parameters": {"type": "object"}} for n in ("read", "write")]
    server = {"type": "mcp", "server_label": label, "server_url": URL, "allowed_tools": TOOLS}
    return {"model": "m", "input": "hi", "tools": [*functions, server]}


def messages_body(label: str) -> dict[str, Any]:
    functions = [{"name": n, "input_schema": {"type": "object"}} for n in ("read", "write")]
    server = {"type": "url", "name": label, "url": URL, "tool_configuration": {"allowed_tools": TOOLS}}
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "m", "max_tokens": 5, "messages": messages, "tools": functions, "mcp_servers": [server]}


def policies() -> dict[str, ToolPolicy]:
    found = {"named": ToolPolicy(RULES), "renamed": ToolPolicy(RULES)}
    try:
        from gatekeeper.rules.mcp_identity import ServerBindings

        found["bound"] = ToolPolicy(RULES, servers=ServerBindings.of({"github": {"urls": [URL]}}))
    except (ImportError, TypeError):  # a commit before MCP identity
        pass
    return found


def per_call(fn: Any, number: int, repeat: int) -> list[float]:
    return [t / number * 1e6 for t in timeit.repeat(fn, number=number, repeat=repeat)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    print(f"{'codec':<10} {'label':<8} {'min us':>8} {'median us':>10}")
    for codec, make in (("responses", responses_body), ("messages", messages_body)):
        for arm, policy in policies().items():
            body = make("github" if arm == "named" else "gh")
            copies = per_call(lambda body=body: copy.deepcopy(body), args.number, args.repeat)

            gated = RESPONSES if codec == "responses" else MESSAGES

            def gate(body: dict[str, Any] = body, policy: ToolPolicy = policy, gated: Any = gated) -> None:
                gated.gate(copy.deepcopy(body), Tier.SMALL, policy)

            times = per_call(gate, args.number, args.repeat)
            fastest = min(times) - min(copies)
            median = statistics.median(times) - statistics.median(copies)
            print(f"{codec:<10} {arm:<8} {fastest:>8.1f} {median:>10.1f}")


if __name__ == "__main__":
    main()
