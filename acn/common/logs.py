"""Structured JSON logs; personal data is masked at this boundary before anything is written."""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

from acn.text.pii import redact_pii

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
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        # Each value is cleaned before encoding, where a pydantic input echo is still one line of text, and the
        # encoded line is masked once more (the masks read JSON escapes and never break the JSON).
        cleaned = {key: _clean(value) for key, value in entry.items()}
        return _redact(json.dumps(cleaned, ensure_ascii=False, default=str))


# pydantic renders each error as "[type=…, input_value=<repr of the input>, input_type=…]" and, in errors()
# dicts, as "'input': <value>": the input is the caller's data, so it never reaches a log line.
_INPUT_VALUE = re.compile(r",? ?input_value=.*(?=, input_type=)|,? ?input_value=.*$", re.MULTILINE)
_INPUT_KEY = re.compile(r"""(['"])input\1: (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^,}\]]*)""")


def _strip_inputs(text: str) -> str:
    """Drop pydantic's echo of the input from an error text."""
    text = _INPUT_VALUE.sub("", text) if "input_value=" in text else text
    return _INPUT_KEY.sub(r"\1input\1: <hidden>", text) if "input" in text else text


def _clean(value: Any) -> Any:
    """Return a log value with pydantic input echoes dropped and personal data masked (containers kept)."""
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, dict):
        hidden = "input" in value and "loc" in value  # a pydantic errors() entry
        return {_clean(str(key)): "<hidden>" if hidden and key == "input" else _clean(item)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    return _redact(_strip_inputs(value if isinstance(value, str) else str(value)))


def _redact(line: str) -> str:
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
