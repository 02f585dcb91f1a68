"""DSSE v1.0 envelopes signed with Ed25519.

The envelope is the JSON form of the Dead Simple Signing Envelope: the payload
and its type are signed through the pre-authentication encoding (PAE), never as
raw JSON, so no canonicalisation is needed and the type cannot be swapped.
Signers and verifiers are Protocols so that another algorithm (or a key held
in a KMS) can be plugged in without touching the envelope code.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from engram_mcp.conformance._words import spoken


class EnvelopeError(ValueError):
    """The envelope is malformed, or no signature verifies with the given key."""


class Signer(Protocol):
    @property
    def keyid(self) -> str: ...

    def sign(self, message: bytes) -> bytes: ...


class Verifier(Protocol):
    @property
    def keyid(self) -> str: ...

    def verify(self, signature: bytes, message: bytes) -> bool: ...


def pae(payload_type: str, body: bytes) -> bytes:
    """The pre-authentication encoding: ``DSSEv1 SP LEN(type) SP type SP LEN(body) SP body``."""
    kind = payload_type.encode("utf-8")
    return b" ".join([b"DSSEv1", str(len(kind)).encode("ascii"), kind, str(len(body)).encode("ascii"), body])


def b64decode(text: Any) -> bytes:
    """Standard or URL-safe base64, padded or not: the DSSE protocol makes verifiers accept either."""
    if not isinstance(text, str):
        raise EnvelopeError("a base64 field is not a string")
    padded = text + "=" * (-len(text) % 4)
    alphabet = b"-_" if ("-" in text or "_" in text) else None
    try:
        return base64.b64decode(padded, altchars=alphabet, validate=True)
    except (binascii.Error, ValueError):
        raise EnvelopeError("a base64 field does not decode") from None


def keyid_of(public_key: Ed25519PublicKey) -> str:
    """SHA-256 (hex) of the key's DER SubjectPublicKeyInfo — what
    ``openssl pkey -pubin -outform DER | sha256sum`` prints for the public PEM."""
    der = public_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@dataclass(frozen=True)
class Ed25519Signer:
    key: Ed25519PrivateKey

    @property
    def keyid(self) -> str:
        return keyid_of(self.key.public_key())

    def sign(self, message: bytes) -> bytes:
        return self.key.sign(message)


@dataclass(frozen=True)
class Ed25519Verifier:
    key: Ed25519PublicKey

    @property
    def keyid(self) -> str:
        return keyid_of(self.key)

    def verify(self, signature: bytes, message: bytes) -> bool:
        try:
            self.key.verify(signature, message)
        except InvalidSignature:
            return False
        return True


def sign_envelope(payload_type: str, body: bytes, signer: Signer) -> dict[str, Any]:
    signature = signer.sign(pae(payload_type, body))
    return {
        "payloadType": payload_type,
        "payload": base64.b64encode(body).decode("ascii"),
        "signatures": [{"keyid": signer.keyid, "sig": base64.b64encode(signature).decode("ascii")}],
    }


@dataclass(frozen=True)
class Opened:
    """What a verified envelope carries: only these bytes were authenticated."""

    payload_type: str
    body: bytes
    keyid: str


def open_envelope(envelope: Any, verifier: Verifier, *, payload_type: str) -> Opened:
    """The authenticated body of ``envelope`` when a signature verifies with ``verifier``.

    The keyid is an unsigned hint: an entry naming another key is skipped, and the keyid
    reported is the verifier's own, never the envelope's. The payload type is checked
    after the signature, as the protocol orders.
    """
    if not isinstance(envelope, dict):
        raise EnvelopeError("not a DSSE envelope (a JSON object is expected)")
    kind, payload, signatures = envelope.get("payloadType"), envelope.get("payload"), envelope.get("signatures")
    if not isinstance(kind, str) or payload is None or not isinstance(signatures, list):
        raise EnvelopeError("not a DSSE envelope: payloadType, payload and signatures are required")
    body = b64decode(payload)
    message = pae(kind, body)
    for entry in signatures:
        if not isinstance(entry, dict) or "sig" not in entry:
            raise EnvelopeError("a signature entry has no sig")
        if entry.get("keyid") and entry.get("keyid") != verifier.keyid:
            continue
        try:
            signature = b64decode(entry["sig"])
        except EnvelopeError:
            continue  # one unreadable signature does not hide another that verifies
        if verifier.verify(signature, message):
            if kind != payload_type:
                raise EnvelopeError(f"the payload type is {spoken(kind)}, not {spoken(payload_type)}")
            return Opened(kind, body, verifier.keyid)
    raise EnvelopeError(f"no signature verifies with the given key (keyid {verifier.keyid})")


# -- keys ------------------------------------------------------------------------


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise EnvelopeError("not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise EnvelopeError("the private key is not an Ed25519 key")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError):
        raise EnvelopeError("not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise EnvelopeError("the public key is not an Ed25519 key")
    return key


def new_key_pair() -> tuple[bytes, bytes]:
    """(private PKCS#8 PEM, public SubjectPublicKeyInfo PEM) of a fresh Ed25519 key."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, public
