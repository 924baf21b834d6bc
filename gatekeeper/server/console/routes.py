"""The console's HTTP side: sign-in, pages, actions and the progress feed, under `/admin/`.

Every route but the sign-in form needs a valid session cookie; every state change also needs
the page's CSRF token and a same-origin `Origin`. Pages are rendered on the server (Jinja2,
autoescaped: model names come from clients); the one script is served from the package.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from gatekeeper.errors import RequestInvalid, StoreError
from gatekeeper.observe import logs
from gatekeeper.observe.redact import clip, redact
from gatekeeper.server.console import views
from gatekeeper.server.console.session import COOKIE, SESSION_TTL_S, Session, Signer, same_origin
from gatekeeper.server.throttle import KeyThrottle, client_source, request_scheme, shared_counts
from gatekeeper.store.profile import check_effort, profile_key, split_key

if TYPE_CHECKING:
    from gatekeeper.core.gatekeeper import Gatekeeper

log = logs.get_logger(__name__)

_FORM_LIMIT = 8192  # bytes: a sign-in or action form is a few fields
_KEY_LIMIT = 512  # characters of a model@effort key taken from a form

Handler = Callable[[Request, Session], Awaitable[Response]]


def _asset(name: str) -> bytes:
    return (resources.files("gatekeeper.server.console") / "static" / name).read_bytes()


class Console:
    """The console's endpoints. The core and the admin key are the app's (`app.state.gk`,
    `app.state.admin_key`, as for the admin API), so a reloaded key takes effect at once."""

    def __init__(self, prefix: str = "/admin", throttle: KeyThrottle | None = None) -> None:
        self.prefix = prefix.rstrip("/")
        self._signer: Signer | None = None
        self._no_key = secrets.token_urlsafe(32)
        self.throttle = throttle if throttle is not None else KeyThrottle()  # shared with the admin API
        self.env = Environment(
            loader=PackageLoader("gatekeeper.server.console", "templates"),
            autoescape=select_autoescape(default=True, default_for_string=True),
        )
        self.env.filters["pct"] = lambda v: f"{float(v):.2f}"
        self.script = _asset("console.js")
        css = _asset("console.css").decode()
        self.env.globals.update(css=css, prefix=self.prefix)
        # The stylesheet is inlined (the sign-in page must style itself without a session) and
        # allowed by its hash: the policy still forbids every other inline style and script.
        style_hash = base64.b64encode(hashlib.sha256(css.encode()).digest()).decode()
        self.headers = {
            "content-security-policy": (
                f"default-src 'none'; script-src 'self'; style-src 'sha256-{style_hash}'; "
                "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                "frame-ancestors 'none'; base-uri 'none'"
            ),
            "x-frame-options": "DENY",
            "x-content-type-options": "nosniff",
            "referrer-policy": "same-origin",
            "cache-control": "no-store",
        }

    def signer(self, request: Request) -> Signer:
        """The signer of the app's current admin key (a new key signs every session out)."""
        # No key (a reload removed it): a random one, so that nobody can sign in.
        key: str = request.app.state.admin_key or self._no_key
        signer = self._signer
        if signer is None or not signer.key_matches(key):
            signer = self._signer = Signer(key)
        return signer

    # -- plumbing ----------------------------------------------------------------------------

    def routes(self) -> list[BaseRoute]:
        p = self.prefix
        return [
            Route(p, self.to_index, methods=["GET"]),
            Route(f"{p}/", self.page(self.index), methods=["GET"]),
            Route(f"{p}/model", self.page(self.model), methods=["GET"]),
            Route(f"{p}/login", self.login_form, methods=["GET"]),
            Route(f"{p}/login", self.login, methods=["POST"]),
            Route(f"{p}/logout", self.action(self.logout), methods=["POST"]),
            Route(f"{p}/actions/measure", self.action(self.measure), methods=["POST"]),
            Route(f"{p}/actions/invalidate", self.action(self.invalidate), methods=["POST"]),
            Route(f"{p}/progress.json", self.data(self.progress), methods=["GET"]),
            Route(f"{p}/assets/console.js", self.data(self.script_asset), methods=["GET"]),
        ]

    async def to_index(self, request: Request) -> Response:
        return RedirectResponse(f"{self.prefix}/", status_code=308, headers=self.headers)

    async def session(self, request: Request) -> Session | None:
        """The request's session: signed by the current key, not expired, and not signed out on
        any replica (asked of the store, off the loop). A store that cannot say: no session."""
        session = self.signer(request).verify(request.cookies.get(COOKIE))
        if session is None:
            return None
        try:
            revoked = await asyncio.to_thread(request.app.state.gk.store.sessions().revoked, session.id)
        except StoreError as exc:
            log.error("console_session_unverifiable", error=redact(str(exc)), consequence="treated as signed out")
            return None
        return None if revoked else session

    def render(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.env.get_template(template).render(**context)
        return HTMLResponse(html, status_code=status, headers=self.headers)

    def page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A page: without a session, the sign-in form (a redirect, so nothing of the page is sent)."""

        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if session is None:
                return RedirectResponse(f"{self.prefix}/login", status_code=303, headers=self.headers)
            return await handler(request, session)

        return endpoint

    def data(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A script or JSON read by the pages: 401 without a session."""

        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if session is None:
                return self.refused(401, "sign in to the console first")
            return await handler(request, session)

        return endpoint

    def action(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """A state change: session, same origin and the page's CSRF token, all three."""

        async def endpoint(request: Request) -> Response:
            session = await self.session(request)
            if session is None:
                return self.refused(401, "sign in to the console first")
            if not self.from_here(request):
                return self.refused(403, "cross-origin request refused")
            form = await _form(request)
            if form is None:
                return self.refused(413, f"form larger than {_FORM_LIMIT} bytes")
            token = request.headers.get("x-csrf-token") or form.get("csrf")
            if not self.signer(request).csrf_ok(session, token):
                return self.refused(403, "missing or wrong CSRF token; reload the page")
            request.state.form = form
            return await handler(request, session)

        return endpoint

    def from_here(self, request: Request) -> bool:
        return same_origin(
            request.headers.get("origin"),
            request.headers.get("referer"),
            request_scheme(request),
            request.headers.get("host"),
        )

    def refused(self, status: int, message: str) -> Response:
        return JSONResponse(
            {"error": {"message": message, "type": "console_error", "code": status}},
            status_code=status,
            headers=self.headers,
        )

    def context(self, request: Request, session: Session, **extra: Any) -> dict[str, Any]:
        return {"csrf": self.signer(request).csrf_token(session), "signed_in": True, **extra}

    # -- sign-in -----------------------------------------------------------------------------

    async def login_form(self, request: Request) -> Response:
        if await self.session(request) is not None:
            return RedirectResponse(f"{self.prefix}/", status_code=303, headers=self.headers)
        return self.render("login.html")

    def _throttled(self, wait: int) -> Response:
        throttled = self.render("login.html", 429, error=f"Too many wrong keys from here; try again in {wait} s.")
        throttled.headers["retry-after"] = str(wait)
        return throttled

    async def login(self, request: Request) -> Response:
        if not self.from_here(request):
            return self.render("login.html", 403, error="Sign-in refused: the form was not posted from this server.")
        source, shared = client_source(request), shared_counts(request)
        # A source past `blocked_after` wrong keys is refused before its key is looked at; past
        # `attempts`, its wrong keys get 429 and a right one still signs in. Other sources are
        # not affected (server/throttle.py).
        wait = await asyncio.to_thread(self.throttle.retry_after, source, shared)
        if wait:
            log.warning("console_sign_in_throttled", client=source, retry_after_s=wait)
            return self._throttled(wait)
        form = await _form(request)
        if form is None or not self.signer(request).key_matches(form.get("key", "")):
            wait = await asyncio.to_thread(self.throttle.failed, source, shared)
            log.warning("console_sign_in_failed", client=source)
            return self._throttled(wait) if wait else self.render("login.html", 401, error="Wrong admin key.")
        await asyncio.to_thread(self.throttle.succeeded, source, shared)
        response = RedirectResponse(f"{self.prefix}/", status_code=303, headers=self.headers)
        response.set_cookie(
            COOKIE,
            self.signer(request).issue(),
            max_age=SESSION_TTL_S,
            path=self.prefix,
            httponly=True,
            samesite="strict",
            secure=request_scheme(request) == "https",
        )
        log.info("console_signed_in", client=source)
        return response

    async def logout(self, request: Request, session: Session) -> Response:
        """Record the sign-out in the store (every replica, every restart), then drop the cookie."""
        try:
            await asyncio.to_thread(request.app.state.gk.store.sessions().revoke, session.id, session.expires)
        except StoreError as exc:
            # The cookie goes either way; say that a copy of it would still be accepted.
            log.error("console_sign_out_not_recorded", error=redact(str(exc)))
            response = self.refused(
                503, "the sign-out could not be recorded (the store failed: the log says why); sign out again later"
            )
        else:
            log.info("console_signed_out", client=client_source(request))
            response = RedirectResponse(f"{self.prefix}/login", status_code=303, headers=self.headers)
        response.delete_cookie(
            COOKIE, path=self.prefix, httponly=True, samesite="strict", secure=request_scheme(request) == "https"
        )
        return response

    # -- pages -------------------------------------------------------------------------------

    async def index(self, request: Request, session: Session) -> Response:
        gk: Gatekeeper = request.app.state.gk
        return self.render(
            "index.html",
            **self.context(
                request,
                session,
                rows=views.rows(gk),
                suite=gk.suite,
                thresholds=gk.settings.bench.thresholds,
                unknown_tier=gk.settings.unknown_tier.value,
                policy=gk.settings.unknown_models,
                bar_width=views.BAR_WIDTH,
                mcp=getattr(request.app.state, "mcp", None),  # the MCP gateway, when mcp.servers is set
                # Configured clients (`clients:`): their rules and the requests each made.
                clients=gk.snapshot().clients.describe(),
                clients_seen=getattr(request.app.state, "clients_seen", {}),
            ),
        )

    async def model(self, request: Request, session: Session) -> Response:
        gk: Gatekeeper = request.app.state.gk
        name = request.query_params.get("name", "")
        page = views.model_page(gk, name) if name else None
        if page is None:
            return self.render("missing.html", 404, **self.context(request, session, model=name))
        return self.render(
            "model.html", **self.context(request, session, page=page, suite=gk.suite, bar_width=views.BAR_WIDTH)
        )

    # -- actions -----------------------------------------------------------------------------

    def pair(self, request: Request) -> tuple[str, str] | None:
        key = request.state.form.get("key", "")
        model, effort = split_key(key)
        if not model or not effort or len(key) > _KEY_LIMIT or effort == views.ALL_EFFORTS:
            return None
        try:
            check_effort(effort, request.app.state.gk.settings.extra_efforts)
        except RequestInvalid:
            return None
        return model, effort

    async def measure(self, request: Request, session: Session) -> Response:
        pair = self.pair(request)
        if pair is None:
            return self.refused(400, "expected a MODEL@EFFORT key with an allowed effort")
        request.app.state.gk.measure(*pair)
        key = profile_key(*pair)
        log.info("console_measure", key=clip(key))
        return self.done(request, {"status": "started", "key": key})

    async def invalidate(self, request: Request, session: Session) -> Response:
        pair = self.pair(request)
        if pair is None:
            return self.refused(400, "expected a MODEL@EFFORT key with an allowed effort")
        try:
            existed = request.app.state.gk.invalidate(*pair)
        except StoreError as exc:  # Redis unreachable, a file that is no store: nothing was invalidated
            log.error("store_unavailable", error=redact(str(exc)), action="invalidate")
            return self.refused(503, StoreError.shown)
        key = profile_key(*pair)
        log.info("console_invalidate", key=clip(key), existed=existed)
        return self.done(request, {"invalidated": key, "existed": existed})

    def done(self, request: Request, body: dict[str, Any]) -> Response:
        """JSON for the page's script; a redirect back for a plain form post (no script)."""
        if "application/json" in request.headers.get("accept", ""):
            return JSONResponse(body, headers=self.headers)
        back = request.state.form.get("back", "")
        model = request.state.form.get("model", "")
        target = f"{self.prefix}/model?name={quote(model, safe='')}" if back == "model" and model else f"{self.prefix}/"
        return RedirectResponse(target, status_code=303, headers=self.headers)

    async def progress(self, request: Request, session: Session) -> Response:
        gk: Gatekeeper = request.app.state.gk
        private = views.private_values(gk.settings)
        measurements = [views.progress_json(p, private) for p in gk.progress()]
        return JSONResponse({"measurements": measurements}, headers=self.headers)

    async def script_asset(self, request: Request, session: Session) -> Response:
        return Response(self.script, media_type="text/javascript", headers=self.headers)


async def _form(request: Request) -> dict[str, str] | None:
    """An urlencoded form, size-capped; None when too large. Repeated fields keep the first."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _FORM_LIMIT:
            return None
    parsed = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def console_routes(prefix: str = "/admin", throttle: KeyThrottle | None = None) -> list[BaseRoute]:
    """The console's routes, mounted beside the admin API when `admin_key` is set."""
    return Console(prefix, throttle).routes()
