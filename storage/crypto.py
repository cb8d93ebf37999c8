"""Encryption at rest for session snapshots, with a key kept apart from the store.

`python -m storage.crypto` prints a new key.
"""

from __future__ import annotations

import os

from cryptography.fernet import Fernet, InvalidToken

from common.errors import PackError

MARKER = "enc:v1:"


class EncryptionKeyError(PackError):
    status = 500
    code = "encryption_key_error"


class SnapshotCipher:
    """Encrypt and decrypt snapshot text; without a key, refuse to read encrypted text (never guess)."""

    def __init__(self, key: str = "") -> None:
        self._fernet = _load(key) if key else None

    @property
    def enabled(self) -> bool:
        return self._fernet is not None

    def seal(self, text: str) -> str:
        """Return the text encrypted (marked), or unchanged when no key is configured."""
        if self._fernet is None:
            return text
        return MARKER + self._fernet.encrypt(text.encode("utf-8")).decode("ascii")

    def open(self, stored: str) -> str:
        """Return the plaintext of stored text; encrypted text needs the right key."""
        if not stored.startswith(MARKER):
            return stored
        if self._fernet is None:
            raise EncryptionKeyError("this session snapshot is encrypted: set ACN_ENCRYPTION_KEY to read it")
        try:
            return self._fernet.decrypt(stored[len(MARKER):].encode("ascii")).decode("utf-8")
        except InvalidToken:
            raise EncryptionKeyError("cannot decrypt the session snapshot: ACN_ENCRYPTION_KEY is not the key "
                                     "it was written with") from None


def _load(value: str) -> Fernet:
    key = value.strip()
    if os.path.isfile(key):
        with open(key, encoding="utf-8") as handle:
            key = handle.read().strip()
    try:
        return Fernet(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise EncryptionKeyError("ACN_ENCRYPTION_KEY is not a Fernet key (32 url-safe base64-encoded bytes) "
                                 "nor a file holding one") from None


if __name__ == "__main__":
    print(Fernet.generate_key().decode("ascii"))
