"""gatekeeper: measure what a model can do with tools, then hide the tools it cannot handle.

    from gatekeeper import Gatekeeper, ToolRegistry
    gk = Gatekeeper.from_config("gatekeeper.yaml")
    registry = ToolRegistry(gk)

This module is the public API: what is imported here is what users rely on. Everything else
(`gatekeeper.server.app`, `gatekeeper.measuring.runner`, ...) is internal and may change. Integrations for
other runtimes live in `gatekeeper.adapters` (each imported on its own: they pull in their
runtime's SDK).
"""

import os

# litellm fetches its model price map from GitHub when imported; gatekeeper never downloads at
# run time (offline hosts, and no surprise egress from a security control): use its bundled copy.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from gatekeeper.config import Settings, load_settings
from gatekeeper.core.gatekeeper import Gatekeeper, Resolution, Route
from gatekeeper.errors import (
    AnswerIncomplete,
    AnswerInvalid,
    BackendError,
    ConfigError,
    CredentialConflict,
    GatekeeperError,
    InconclusiveMeasurement,
    LocalModelError,
    MeasurementFailed,
    NotMeasured,
    ProxyError,
    RequestInvalid,
    StoreError,
    SuiteError,
    ToolArgumentsInvalid,
    ToolBudgetExceeded,
    ToolChoiceBlocked,
    ToolNotAllowed,
    WriteFenced,
)
from gatekeeper.inprocess.answers import AnswerGate, StreamRelay, gating_http_client
from gatekeeper.inprocess.registry import RegisteredTool, RoutedTools, ToolRegistry, function_schema
from gatekeeper.inprocess.wrap import agate_body, agate_call, gate_body, gated, tool_carriers, unlisted_fields
from gatekeeper.protocols.table import PROTOCOLS, ClientProtocol, register_protocol
from gatekeeper.rules.tiers import Tier
from gatekeeper.store import JsonFileStore, ProfileStore
from gatekeeper.store.profile import Profile
from gatekeeper.suite.loader import Suite, load_suite

__all__ = [  # noqa: RUF022 - grouped by role, not sorted
    # the core and its front ends
    "Gatekeeper",
    "Resolution",
    "Route",
    "ToolRegistry",
    "RegisteredTool",
    "RoutedTools",
    "function_schema",
    "gated",
    # the proxy's request step in process, for any client protocol (what the adapters build on)
    "gate_body",
    "agate_body",
    "unlisted_fields",
    "tool_carriers",
    "gating_http_client",  # ... and its answer side, in an SDK's HTTP client
    "agate_call",  # agate_body and the call's answer side (an AnswerGate), for the LiteLLM hook
    "AnswerGate",
    "StreamRelay",
    # the client protocols served: one registry entry each (gatekeeper/protocols/table.py)
    "PROTOCOLS",
    "ClientProtocol",
    "register_protocol",
    # settings, suite, profiles
    "Settings",
    "load_settings",
    "Suite",
    "load_suite",
    "Tier",
    "Profile",
    "ProfileStore",
    "JsonFileStore",
    # every error gatekeeper raises on purpose (gatekeeper/errors.py)
    "GatekeeperError",
    "ConfigError",
    "SuiteError",
    "StoreError",
    "BackendError",
    "InconclusiveMeasurement",
    "LocalModelError",
    "NotMeasured",
    "RequestInvalid",
    "AnswerIncomplete",
    "AnswerInvalid",
    "ToolBudgetExceeded",
    "ToolChoiceBlocked",
    "ToolNotAllowed",
    "ToolArgumentsInvalid",
    "ProxyError",
    "CredentialConflict",
    "MeasurementFailed",
    "WriteFenced",
]
