"""The /ui blueprint: server-rendered pages over the node functions.

It adds no authentication of its own: server.py's before_request checks the API key on every path outside
its open set, /ui and /ui/static included, and sets `g.tenant`, which every view reads through.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
from flask import Blueprint, Response, current_app, g, render_template, request

from common.deps import Deps
from common.errors import ValidationError
from common.models import Namespace
from inspector.diff import version_diff
from inspector.i18n import HTML_LANG, KIND_LABELS, LABELS, pick_language
from inspector.namespaces import overview
from inspector.session_view import session_page

LANGUAGE_COOKIE = "acn_ui_lang"
KINDS = list(KIND_LABELS["en"])
MODES = ("auto", "snapshot", "focused", "streaming")
LAYERS = ("system", "memory", "working", "history", "user_input")
# Inline styles place segments over their turns; scripts come only from /ui/static.
CSP = "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"


def create_blueprint() -> Blueprint:
    """Return the inspector blueprint (mounted at /ui)."""
    blueprint = Blueprint("inspector", __name__, url_prefix="/ui", template_folder="templates",
                          static_folder="static")
    blueprint.add_url_rule("", "namespaces", namespaces_view)
    blueprint.add_url_rule("/", "namespaces_slash", namespaces_view)
    blueprint.add_url_rule("/agents/<agent_id>/sessions/<session_id>", "session", session_view)
    blueprint.add_url_rule("/agents/<agent_id>/sessions/<session_id>/diff", "diff", diff_view)
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
        errors = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()]
        raise ValidationError("; ".join(errors), errors) from None


def version_arg(name: str) -> int:
    value = request.args.get(name, "")
    if not value.isdigit() or int(value) < 1:
        raise ValidationError(f"{name}: a version number (1 or more) is required", [f"{name}: invalid"])
    return int(value)


def namespaces_view() -> str:
    query = request.args.get("q", "")
    return render_template("inspector/namespaces.html", overview=overview(current_app.extensions["acn"],
                                                                           g.tenant, query), q=query)


def session_view(agent_id: str, session_id: str) -> str:
    page = session_page(namespace(agent_id, session_id), deps())
    return render_template("inspector/session.html", page=page, kinds=KINDS, modes=MODES, layers=LAYERS)


def diff_view(agent_id: str, session_id: str) -> str:
    ns = namespace(agent_id, session_id)
    diff = version_diff(ns, version_arg("from"), version_arg("to"), deps())
    # The page's script asks for the fragment alone; a plain link or form submission gets a whole page.
    template = "diff_fragment.html" if request.headers.get("X-Fragment") == "1" else "diff.html"
    return render_template(f"inspector/{template}", diff=diff, ns=ns)


def template_context() -> dict[str, Any]:
    lang = language()
    labels = LABELS[lang]

    def label(name: str, **values: Any) -> str:
        return labels[name].format(**values)

    return {"lang": lang, "html_lang": HTML_LANG[lang], "t": labels, "label": label,
            "kind_label": lambda kind: KIND_LABELS[lang].get(kind, kind), "utc": utc_text,
            "script_labels": {**labels, **{f"kind_{k}": v for k, v in KIND_LABELS[lang].items()}}}


def utc_text(epoch_ms: int) -> str:
    """Return a UTC timestamp as ISO 8601 (the page's script shows it in local time)."""
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
