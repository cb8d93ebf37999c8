"""Encryption at rest (session snapshots, memory rows), with a key kept apart from the store.

`python -m acn.storage.database.crypto` prints a new key.
"""

from __future__ import annotations

import base64
import os

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from acn.common.errors import PackError

MARKER = "enc:v1:"


class EncryptionKeyError(PackError):
    code = "encryption_key_error"


class SnapshotCipher:
    """Encrypt and decrypt snapshot text; without a key, refuse to read encrypted text (never guess).

    `what` names the encrypted thing in errors (memory rows use the same cipher).
    """

    def __init__(self, key: str = "", what: str = "session snapshot") -> None:
        self._fernet = _load(key) if key else None
        self._what = what

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
            raise EncryptionKeyError(f"this {self._what} is encrypted: set ACN_ENCRYPTION_KEY to read it")
        try:
            return self._fernet.decrypt(stored[len(MARKER):].encode("ascii")).decode("utf-8")
        except InvalidToken:
            raise EncryptionKeyError(f"cannot decrypt the {self._what}: ACN_ENCRYPTION_KEY is not the key "
                                     "it was written with") from None


def derive_key(value: str, purpose: str) -> bytes:
    """Return a 32-byte key for one purpose (HKDF-SHA256 over the Fernet key), so that no two uses share a key."""
    raw = base64.urlsafe_b64decode(_read(value).encode("ascii"))
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose.encode("utf-8")).derive(raw)


def _read(value: str) -> str:
    """Return the key text (the value itself, or the content of the file it names), checked to be a Fernet key."""
    key = value.strip()
    if os.path.isfile(key):
        with open(key, encoding="utf-8") as handle:
            key = handle.read().strip()
    try:
        Fernet(key.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        raise EncryptionKeyError("ACN_ENCRYPTION_KEY is not a Fernet key (32 url-safe base64-encoded bytes) "
                                 "nor a file holding one") from None
    return key


def _load(value: str) -> Fernet:
    return Fernet(_read(value).encode("ascii"))


if __name__ == "__main__":
    print(Fernet.generate_key().decode("ascii"))
