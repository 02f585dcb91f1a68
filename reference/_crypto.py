"""AES-256-GCM sealing of pending candidates, with per-candidate data keys wrapped by a KEK.

Each seal draws a fresh data key, so destroying one candidate's body is deleting
its wrapped key from the store: the key-encryption key (KEK) alone opens nothing.

Layout of ``Sealed.ciphertext``, format 1 (every field fixed-size except the body):

    offset  size  field
    0       1     format version, 0x01
    1       12    GCM nonce, random per seal
    13      n     AES-256-GCM ciphertext of the plaintext (n = plaintext length)
    13+n    16    GCM tag

``Sealed.wrapped_key`` is the 32-byte data key under RFC 3394 AES key wrap with
the 32-byte KEK: 40 bytes, with the wrap's own integrity check.

The associated data is authenticated but never stored, so a body opens only for
the scope and candidate it was sealed for:

    DOMAIN || version byte || len(tenant) || tenant || len(workspace) || workspace
           || len(candidate_id) || candidate_id

with each length a 4-byte big-endian count of the UTF-8 bytes that follow, so no
two (tenant, workspace, candidate_id) triples share an encoding.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import struct
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from ._ports import Scope, SealBroken, Sealed

FORMAT_V1 = 0x01
DOMAIN = b"engram-memory-mcp/candidate-seal/v1"
KEK_BYTES = 32
_DATA_KEY_BYTES = 32
_NONCE_BYTES = 12
_TAG_BYTES = 16
_HEADER_BYTES = 1 + _NONCE_BYTES
_WRAPPED_KEY_BYTES = _DATA_KEY_BYTES + 8  # RFC 3394 adds one 64-bit integrity block


def _field(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">I", len(raw)) + raw


def _associated_data(version: int, scope: Scope, candidate_id: str) -> bytes:
    return b"".join(
        (DOMAIN, bytes((version,)), _field(scope.tenant), _field(scope.workspace), _field(candidate_id))
    )


class AesGcmCipher:
    """The reference ``Cipher``: AES-256-GCM bodies, data keys wrapped by one 32-byte KEK."""

    __slots__ = ("_kek",)

    def __init__(self, kek: bytes) -> None:
        if not isinstance(kek, (bytes, bytearray)) or len(kek) != KEK_BYTES:
            raise ValueError(f"the key-encryption key must be exactly {KEK_BYTES} bytes")
        self._kek = bytes(kek)

    def __repr__(self) -> str:
        # Never let the KEK reach a log line through repr().
        return "AesGcmCipher(kek=<redacted>)"

    def seal(self, plaintext: bytes, *, scope: Scope, candidate_id: str) -> Sealed:
        data_key = AESGCM.generate_key(bit_length=8 * _DATA_KEY_BYTES)
        nonce = os.urandom(_NONCE_BYTES)
        aad = _associated_data(FORMAT_V1, scope, candidate_id)
        body = AESGCM(data_key).encrypt(nonce, bytes(plaintext), aad)
        return Sealed(
            ciphertext=bytes((FORMAT_V1,)) + nonce + body,
            wrapped_key=aes_key_wrap(self._kek, data_key),
        )

    def open(self, sealed: Sealed, *, scope: Scope, candidate_id: str) -> bytes:
        # Every failure becomes SealBroken `from None`, so no cryptography
        # exception escapes, not even as a chained cause.
        try:
            ciphertext = bytes(sealed.ciphertext)
            wrapped_key = bytes(sealed.wrapped_key)
        except TypeError:
            raise SealBroken("sealed body is not bytes") from None
        if len(ciphertext) < _HEADER_BYTES + _TAG_BYTES:
            raise SealBroken("sealed body is truncated")
        if ciphertext[0] != FORMAT_V1:
            raise SealBroken("sealed body has an unknown format version")
        if len(wrapped_key) != _WRAPPED_KEY_BYTES:
            raise SealBroken("wrapped key has the wrong length")
        try:
            data_key = aes_key_unwrap(self._kek, wrapped_key)
        except (InvalidUnwrap, ValueError):
            raise SealBroken("wrapped key does not unwrap under this key-encryption key") from None
        try:
            aad = _associated_data(FORMAT_V1, scope, candidate_id)
        except UnicodeEncodeError:
            raise SealBroken("scope or candidate id cannot be encoded") from None
        nonce, body = ciphertext[1:_HEADER_BYTES], ciphertext[_HEADER_BYTES:]
        try:
            return AESGCM(data_key).decrypt(nonce, body, aad)
        except (InvalidTag, ValueError):
            raise SealBroken("sealed body does not authenticate for this scope and candidate") from None


KEYED_DIGEST_PREFIX = "hmac-sha256:"
_KEYED_DOMAIN = b"engram-memory-mcp/stored-payload-digest/v1"


def derive_key(root: bytes, purpose: str) -> bytes:
    """A 32-byte subkey of ``root`` for one purpose (HKDF-SHA256), independent of every other purpose's."""
    return HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=f"engram-memory-mcp/{purpose}/v1".encode()
    ).derive(root)


class DigestKeyer:
    """Stored payload digests as an HMAC-SHA256 under a server secret.

    A plain payload digest in the database lets anyone with a copy of the file
    confirm a guess of the content, even after the content itself was withdrawn
    or forgotten. Outside admitted records the store keeps only this keyed
    form, bound to the scope, so the same content in two scopes does not match
    either; equality within a scope (the tombstone check) still works. The
    public digest stays inside an admitted record's body, which forget deletes.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        if len(key) < 32:
            raise ValueError("the digest key must be at least 32 bytes")
        self._key = bytes(key)

    def __repr__(self) -> str:
        return "DigestKeyer(key=<redacted>)"

    def stored(self, digest: str, scope: Scope) -> str:
        """The keyed form of a public digest; a value already keyed is returned unchanged."""
        if digest.startswith(KEYED_DIGEST_PREFIX):
            return digest
        message = b"".join((_KEYED_DOMAIN, _field(scope.tenant), _field(scope.workspace), _field(digest)))
        return KEYED_DIGEST_PREFIX + hmac.new(self._key, message, hashlib.sha256).hexdigest()


def write_kek(path: str | os.PathLike[str]) -> bytes:
    """Create a new KEK file (32 random bytes, mode 0o600) and return the key.

    An existing file is never overwritten: replacing a KEK would orphan every
    body sealed under it, so that takes a deliberate delete first.
    """
    kek = os.urandom(KEK_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags, 0o600)
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, 0o600)  # the mode given to open() is narrowed by the umask, never widened; pin it
        with os.fdopen(fd, "wb") as handle:
            fd = -1
            handle.write(kek)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(path).unlink(missing_ok=True)
        raise
    return kek


def load_kek(path: str | os.PathLike[str]) -> bytes:
    """Read a KEK file written by ``write_kek``: exactly 32 raw bytes.

    The error for a wrong size gives only the size, never the file's bytes,
    since a mistaken file may well hold some other secret.
    """
    with open(path, "rb") as handle:
        kek = handle.read(KEK_BYTES + 1)
    if len(kek) != KEK_BYTES:
        found = "more than 32" if len(kek) > KEK_BYTES else str(len(kek))
        raise ValueError(
            f"key-encryption key file {os.fspath(path)!r} must hold exactly {KEK_BYTES} bytes; it holds {found}"
        )
    return kek
