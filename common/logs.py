"""Structured JSON logs; personal data is masked at this boundary before anything is written."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + "Z",
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return _redact(json.dumps(entry, ensure_ascii=False, default=str))


def _redact(line: str) -> str:
    from text.pii import redact_pii  # imported lazily: logging is configured before anything else

    return redact_pii(line)[0]


def configure_logging(level: str = "INFO") -> None:
    """Send the pack's logs to stderr as JSON lines (idempotent)."""
    # Werkzeug's access lines would print raw paths and query strings; the server logs each request itself
    # (redacted, with its request id), so werkzeug keeps only its warnings, through the same handler.
    for name, logger_level in (("acn", level.upper()), ("werkzeug", "WARNING")):
        _attach(logging.getLogger(name), logger_level)
    # pymilvus logs every failed RPC with a traceback; the store turns those into StoreUnavailableError
    # and the server logs them once, as JSON, with the request id.
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)


def _attach(logger: logging.Logger, level: str) -> None:
    logger.setLevel(level)
    if not any(getattr(h, "_acn", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        handler._acn = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
