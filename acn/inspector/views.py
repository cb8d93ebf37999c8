"""The /ui blueprint: server-rendered pages over the node functions.

server.py's before_request authenticates every /ui path through inspector.signin (the API key header, or the
session cookie /ui/login hands out) and sets `g.tenant`, which every view reads through. This blueprint adds the
sign-in pages and refuses any state-changing /ui request without the page's CSRF token.
"""

from __future__ import annotations

import hmac
import re
import secrets
from datetime import UTC, datetime
from typing import Any

import pydantic
from flask import Blueprint, Response, current_app, g, redirect, render_template, request, url_for
from werkzeug.wrappers.response import Response as BaseResponse

from acn.app.json_body import read_json_body
from acn.app.responses import ok_response, validate
from acn.common.errors import NotFoundError, PackError, SignInThrottledError, ValidationError
from acn.common.models import Namespace
from acn.common.stored import stamp_problem
from acn.inspector.diff import version_diff
from acn.inspector.i18n import HTML_LANG, KIND_LABELS, LABELS, SCOPE_LABELS, pick_language
from acn.inspector.namespaces import overview
from acn.inspector.session_view import session_page
from acn.inspector.signin import (
    COOKIE_PATH,
    LOGIN_COOKIE,
    LOGIN_FORM_SECONDS,
    LOGIN_PATH,
    SESSION_COOKIE,
    SignInRequired,
    UiAuth,
    safe_next,
    same_origin,
)
from acn.services.deps import Deps

LANGUAGE_COOKIE = "acn_ui_lang"
KINDS = list(KIND_LABELS["en"])
MODES = ("auto", "snapshot", "focused", "streaming")
LAYERS = ("system", "memory", "working", "history", "user_input")
# The nodes the session page calls. It calls them here, not at /v1, because the sign-in cookie only works here.
UI_NODES = ("assemble", "memory_retrieve", "session_rollback")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# Inline styles place segments over their turns; scripts come only from /ui/static.
CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"


VERSION_ARG = re.compile(r"[0-9]{1,9}")
TURN_ARG = re.compile(r"[0-9]{1,10}")


def create_blueprint() -> Blueprint:
    """Return the inspector blueprint (mounted at /ui)."""
    blueprint = Blueprint("inspector", __name__, url_prefix="/ui", template_folder="templates",
                          static_folder="static")
    blueprint.add_url_rule("", "namespaces", namespaces_view)
    blueprint.add_url_rule("/", "namespaces_slash", namespaces_view)
    blueprint.add_url_rule("/agents/<agent_id>/sessions/<session_id>", "session", session_view)
    blueprint.add_url_rule("/agents/<agent_id>/sessions/<session_id>/diff", "diff", diff_view)
    blueprint.add_url_rule("/nodes/<name>", "node", node_view, methods=["POST"])
    blueprint.add_url_rule("/login", "login", login_view, methods=["GET", "POST"])
    blueprint.add_url_rule("/logout", "logout", logout_view, methods=["POST"])
    blueprint.before_request(check_csrf)
    blueprint.register_error_handler(SignInRequired, to_sign_in)
    blueprint.context_processor(template_context)
    blueprint.after_request(finish)
    return blueprint


def deps() -> Deps:
    """Return this tenant's node dependencies."""
    return current_app.extensions["acn"].deps(g.tenant)  # type: ignore[no-any-return]


def language() -> str:
    """Return (and remember for this request) the page language."""
    if "ui_lang" not in g:
        g.ui_lang = pick_language(request.args.get("lang"), request.cookies.get(LANGUAGE_COOKIE),
                                  list(request.accept_languages.values()))
    return str(g.ui_lang)


def namespace(agent_id: str, session_id: str) -> Namespace:
    """Return the namespace of the URL; an invalid identifier is a 422 like everywhere else."""
    try:
        return Namespace(agent_id=agent_id, session_id=session_id)
    except pydantic.ValidationError as error:
        errors = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                  for e in error.errors(include_input=False, include_url=False)]
        raise ValidationError("; ".join(errors), errors) from None


def version_arg(name: str) -> int:
    """Read a version number from the query string; only ASCII digits, at most nine ("²".isdigit() is True)."""
    value = request.args.get(name, "")
    if not VERSION_ARG.fullmatch(value) or int(value) < 1:
        raise ValidationError(f"{name}: a version number (1 or more) is required", [f"{name}: invalid"])
    return int(value)


def turns_from_arg() -> int | None:
    """Read the first turn the timeline shows; absent: the latest turns. Only ASCII digits, at most ten."""
    value = request.args.get("turns_from")
    if value is None:
        return None
    if not TURN_ARG.fullmatch(value):
        raise ValidationError("turns_from: a turn number is required", ["turns_from: invalid"])
    return int(value)


def namespaces_view() -> str:
    query = request.args.get("q", "")
    return render_template("inspector/namespaces.html", overview=overview(current_app.extensions["acn"],
                                                                           g.tenant, query), q=query)


def session_view(agent_id: str, session_id: str) -> str:
    page = session_page(namespace(agent_id, session_id), deps(), turns_from_arg())
    return render_template("inspector/session.html", page=page, kinds=KINDS, modes=MODES, layers=LAYERS)


def diff_view(agent_id: str, session_id: str) -> str:
    ns = namespace(agent_id, session_id)
    diff = version_diff(ns, version_arg("from"), version_arg("to"), deps())
    # The page's script asks for the fragment alone; a plain link or form submission gets a whole page.
    template = "diff_fragment.html" if request.headers.get("X-Fragment") == "1" else "diff.html"
    return render_template(f"inspector/{template}", diff=diff, ns=ns)


def ui_auth() -> UiAuth:
    return current_app.extensions["acn_ui_auth"]  # type: ignore[no-any-return]


def check_csrf() -> None:
    """Refuse a state-changing /ui request without this credential's CSRF token (sign-in checks its own)."""
    if request.method in SAFE_METHODS or request.path == LOGIN_PATH:
        return
    presented = request.headers.get("X-CSRF-Token") or (request.form.get("csrf_token") if request.form else None)
    credential = g.get("ui_credential")
    ui_auth().check_csrf(credential.binding if credential else "", presented)


def to_sign_in(_error: SignInRequired) -> BaseResponse:
    """Send a browser that has no credential to the sign-in page, then back to where it was going."""
    target = request.full_path.rstrip("?") if request.query_string else request.path
    return redirect(url_for("inspector.login", next=target), code=303)


def node_view(name: str) -> Response:
    """Run one of the page's nodes for this tenant (the same models and errors as POST /v1/nodes/<name>)."""
    spec = current_app.extensions["acn_nodes"].get(name)
    if name not in UI_NODES or spec is None:
        raise NotFoundError(f"the inspector calls only {', '.join(UI_NODES)}")
    result = spec.run(validate(spec.request_model, read_json_body()), deps())
    current_app.extensions["acn_metrics"].observe_result(name, result)
    return ok_response(result)


def login_view() -> BaseResponse | str:
    auth = ui_auth()
    if auth.open:
        return render_template("inspector/login.html", open=True)
    if request.method == "GET":
        return login_form(200)
    nonce = request.cookies.get(LOGIN_COOKIE, "")
    if not same_origin(request) or not nonce or not hmac_equal(request.form.get("csrf_token", ""),
                                                                auth.login_token(nonce)):
        return login_form(403, "sign_in_expired")
    key = request.form.get("api_key", "").strip()
    try:
        auth.check_key(f"Bearer {key}", request, "sign_in")
    except SignInThrottledError as error:
        throttled = login_form(429, "sign_in_throttled")
        throttled.headers["Retry-After"] = str(error.seconds)
        return throttled
    except PackError:
        return login_form(401, "sign_in_failed")
    response = redirect(safe_next(request.form.get("next")), code=303)
    response.set_cookie(SESSION_COOKIE, auth.issue(key), max_age=auth.lifetime, path=COOKIE_PATH,
                        secure=request.is_secure, httponly=True, samesite="Strict")
    response.delete_cookie(LOGIN_COOKIE, path=LOGIN_PATH, secure=request.is_secure, httponly=True, samesite="Strict")
    return response


def login_form(status: int, problem: str = "") -> Response:
    """Render the sign-in form with a fresh login CSRF token bound to a short-lived cookie."""
    nonce = secrets.token_urlsafe(16)
    target = safe_next(request.values.get("next"))
    page = render_template("inspector/login.html", open=False, problem=problem, next=target,
                           login_csrf=ui_auth().login_token(nonce))
    response = Response(page, status=status, mimetype="text/html")
    response.set_cookie(LOGIN_COOKIE, nonce, max_age=LOGIN_FORM_SECONDS, path=LOGIN_PATH, secure=request.is_secure,
                        httponly=True, samesite="Strict")
    return response


def logout_view() -> BaseResponse:
    query: dict[str, Any] = {} if ui_auth().open else {"signed_out": "1"}
    response = redirect(url_for("inspector.login", **query), code=303)
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, secure=request.is_secure, httponly=True,
                           samesite="Strict")
    return response


def hmac_equal(presented: str, expected: str) -> bool:
    return hmac.compare_digest(presented.encode(), expected.encode())


def template_context() -> dict[str, Any]:
    lang = language()
    labels = LABELS[lang]

    def label(name: str, **values: Any) -> str:
        return labels[name].format(**values)

    credential = g.get("ui_credential")
    return {"csrf_token": ui_auth().csrf_token(credential.binding) if credential else "",
            "signed_in": bool(credential and credential.session), "lang": lang, "html_lang": HTML_LANG[lang],
            "t": labels, "label": label,
            "kind_label": lambda kind: KIND_LABELS[lang].get(kind, kind), "utc": utc_text,
            "scope_label": lambda scope: SCOPE_LABELS[lang].get(scope, scope),
            "script_labels": {**labels, **{f"kind_{k}": v for k, v in KIND_LABELS[lang].items()}}}


def utc_text(epoch_ms: int) -> str:
    """Return a UTC timestamp as ISO 8601 (the page's script shows it in local time); a stored stamp outside the
    stored-row bounds (acn/common/stored.py) as its number: it is no date, and one such row must not fail a page."""
    if stamp_problem(epoch_ms) is not None:
        return str(epoch_ms)
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def finish(response: Response) -> Response:
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Content-Language"] = HTML_LANG[language()]
    response.vary.add("Accept-Language")
    requested = request.args.get("lang")
    if requested in LABELS:
        response.set_cookie(LANGUAGE_COOKIE, requested, max_age=365 * 86400, path="/ui", samesite="Lax")
    return response
