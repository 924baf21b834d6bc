"""The console's model page shows which requirement hides a tool and where routing sends requests."""

from __future__ import annotations

import httpx
from conftest import make_profile, running_proxy, seed_store, settings_for

from gatekeeper.rules.tiers import Tier

KEY = "console-routing-key-41"


def test_the_model_page_shows_requirements_and_routing(store_path, default_suite):
    seed_store(
        store_path,
        make_profile("m", Tier.SMALL, default_suite, effort="low"),
        make_profile("m", Tier.LARGE, default_suite, effort="high", score_intervals={"json": [0.81, 0.99]}),
    )
    tools = {
        "required_tier": {"emit_invoice": "medium", "execute_command": "large"},
        "requires": {"emit_invoice": {"json": 0.9}},
    }
    settings = settings_for("http://127.0.0.1:9/v1", store_path, admin_key=KEY, tools=tools, routing={})
    with running_proxy(settings) as proxy, httpx.Client(base_url=proxy.url, timeout=30) as client:
        assert client.post("/admin/login", data={"key": KEY}, headers={"origin": proxy.url}).status_code == 303
        page = client.get("/admin/model", params={"name": "m"}).text
    invoice = page.split('data-rule="emit_invoice"', 1)[1].split("</tr>", 1)[0]
    assert "json &gt;= 0.9" in invoice  # the rule's minimum
    assert "json &gt;= 0.9 (bound 0.810)" in invoice  # why @high does not see it
    routing = page.split('class="routing"', 1)[1]
    low = routing.split('data-routing="low"', 1)[1].split("</tr>", 1)[0]
    assert "m@high (escalated)" in low
    high = routing.split('data-routing="high"', 1)[1].split("</tr>", 1)[0]
    assert "as asked" in high
