"""The admin console: server-rendered pages over the core, served by the proxy under `/admin/`.

Enabled with `admin_key`. Every asset (templates, stylesheet, script) ships in this package:
no CDN, no build step.
"""

from gatekeeper.server.console.routes import console_routes

__all__ = ["console_routes"]
