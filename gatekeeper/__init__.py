"""gatekeeper: measure what a model can do with tools, then hide the tools it cannot handle.

    from gatekeeper import Gatekeeper, ToolRegistry
    gk = Gatekeeper.from_config("gatekeeper.yaml")
    registry = ToolRegistry(gk)
"""

from gatekeeper.config import Settings, load_settings
from gatekeeper.core import Gatekeeper, NotMeasured, Resolution
from gatekeeper.errors import (BackendError, ConfigError, GatekeeperError, SuiteError, ToolArgumentsInvalid,
                               ToolNotAllowed)
from gatekeeper.profiles import JsonFileStore, Profile, ProfileStore
from gatekeeper.registry import ToolRegistry
from gatekeeper.suite import Suite, load_suite
from gatekeeper.tiers import Tier
from gatekeeper.wrap import gated

__all__ = [
    "BackendError", "ConfigError", "Gatekeeper", "GatekeeperError", "JsonFileStore", "NotMeasured", "Profile",
    "ProfileStore", "Resolution", "Settings", "Suite", "SuiteError", "Tier", "ToolArgumentsInvalid",
    "ToolNotAllowed", "ToolRegistry", "gated", "load_settings", "load_suite",
]
