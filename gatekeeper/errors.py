"""One exception hierarchy for the whole library."""


class GatekeeperError(Exception):
    """Base class of every error gatekeeper raises on purpose."""


class SuiteError(GatekeeperError):
    """A suite file is missing, malformed or invalid; the message starts with the file."""


class ConfigError(GatekeeperError):
    """The config file is invalid; the message names the key path."""


class StoreError(GatekeeperError):
    """The profile store cannot be written without destroying a file that is not a store."""


class BackendError(GatekeeperError):
    """The model backend failed (after retries): not a verdict on the model."""


class ToolNotAllowed(GatekeeperError):
    """A tool call was refused because the model's tier does not allow that tool."""


class ToolArgumentsInvalid(GatekeeperError):
    """A tool call's arguments do not match the tool's schema."""
