"""The HTTP envelopes every route uses: one success shape, one error shape, request validation to 422."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from flask import Response, current_app, g

from acn.common.errors import ValidationError
from acn.common.models import NodeResponse


def error_response(status: int, code: str, message: str, errors: list[str] | None = None) -> Response:
    """Return the one error envelope every failure uses."""
    metrics = current_app.extensions.get("acn_metrics")
    if metrics is not None:
        metrics.observe_error(code)
    body = {"ok": False, "status": status, "code": code, "error": message, "errors": errors or [message],
            "request_id": g.get("request_id", "")}
    return Response(json.dumps(body, ensure_ascii=False), status=status, mimetype="application/json")


def ok_response(model: NodeResponse) -> Response:
    """Return a success envelope carrying the request id.

    pydantic writes the JSON itself (in Rust): for an assembled context of 70 KB that is ~0.2 ms against
    ~0.6 ms for model_dump and json.dumps.
    """
    body = model.model_copy(update={"request_id": g.get("request_id", "")}).model_dump_json()
    return Response(body, status=200, mimetype="application/json")


def validate(model: type[pydantic.BaseModel], data: Any) -> Any:
    """Validate data against a request model; failures become a 422 listing each field path."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as error:
        # Without the input: a message (or a log line) must never echo the caller's data back.
        errors = [f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                  for e in error.errors(include_input=False, include_url=False)]
        raise ValidationError("; ".join(errors), errors) from None
