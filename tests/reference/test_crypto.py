"""The reference cipher: sealed pending candidates open only with the right key, scope and id."""

from __future__ import annotations

import functools
import os
import stat
import struct
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.keywrap import aes_key_unwrap

from engram_mcp.reference._crypto import DOMAIN, FORMAT_V1, AesGcmCipher, load_kek, write_kek
from engram_mcp.reference._ports import Scope, SealBroken, Sealed

KEK = bytes(range(32))
SCOPE = Scope(tenant="tenant-a", workspace="workspace-1")
CANDIDATE = "candidate_" + "ab" * 32
PLAINTEXT = b'{"payload":{"text":"the quarterly migration plan, pending review"},"schema_version":1}'


@pytest.fixture
def cipher() -> AesGcmCipher:
    return AesGcmCipher(KEK)


@pytest.fixture
def sealed(cipher: AesGcmCipher) -> Sealed:
    return cipher.seal(PLAINTEXT, scope=SCOPE, candidate_id=CANDIDATE)


def assert_broken(open_: Callable[[], bytes]) -> None:
    with pytest.raises(SealBroken) as caught:
        open_()
    assert type(caught.value) is SealBroken
    # Raised `from None`: no cryptography exception rides along as the cause.
    assert caught.value.__cause__ is None
    assert caught.value.__context__ is None or caught.value.__suppress_context__


@pytest.mark.parametrize("plaintext", [b"", b"x", PLAINTEXT, os.urandom(70_000)])
def test_seal_then_open_round_trips(cipher: AesGcmCipher, plaintext: bytes) -> None:
    sealed = cipher.seal(plaintext, scope=SCOPE, candidate_id=CANDIDATE)
    assert cipher.open(sealed, scope=SCOPE, candidate_id=CANDIDATE) == plaintext
    # Another instance over the same KEK opens it too: nothing lives in process memory.
    assert AesGcmCipher(KEK).open(sealed, scope=SCOPE, candidate_id=CANDIDATE) == plaintext


def test_layout_is_version_nonce_body_tag_and_a_40_byte_wrap(sealed: Sealed) -> None:
    assert sealed.ciphertext[0] == FORMAT_V1 == 1
    assert len(sealed.ciphertext) == 1 + 12 + len(PLAINTEXT) + 16
    assert len(sealed.wrapped_key) == 40


def test_documented_format_opens_without_the_class(sealed: Sealed) -> None:
    """Pins the layout and associated data described in the module, byte for byte."""
    data_key = aes_key_unwrap(KEK, sealed.wrapped_key)

    def field(value: str) -> bytes:
        raw = value.encode("utf-8")
        return struct.pack(">I", len(raw)) + raw

    aad = DOMAIN + b"\x01" + field(SCOPE.tenant) + field(SCOPE.workspace) + field(CANDIDATE)
    assert DOMAIN == b"engram-memory-mcp/candidate-seal/v1"
    assert AESGCM(data_key).decrypt(sealed.ciphertext[1:13], sealed.ciphertext[13:], aad) == PLAINTEXT


def test_plaintext_never_appears_in_the_sealed_bytes(cipher: AesGcmCipher) -> None:
    marker = b"PLAINTEXT-MARKER-" * 8
    sealed = cipher.seal(marker, scope=SCOPE, candidate_id=CANDIDATE)
    for blob in (sealed.ciphertext, sealed.wrapped_key):
        assert marker not in blob
        assert b"PLAINTEXT-MARKER" not in blob
    # Nor do the scope or the candidate id: they are authenticated, not stored.
    for name in (SCOPE.tenant, SCOPE.workspace, CANDIDATE):
        assert name.encode() not in sealed.ciphertext
    assert KEK not in sealed.ciphertext + sealed.wrapped_key


def test_two_seals_of_the_same_plaintext_differ(cipher: AesGcmCipher) -> None:
    first = cipher.seal(PLAINTEXT, scope=SCOPE, candidate_id=CANDIDATE)
    second = cipher.seal(PLAINTEXT, scope=SCOPE, candidate_id=CANDIDATE)
    assert first.ciphertext != second.ciphertext
    assert first.ciphertext[1:13] != second.ciphertext[1:13]  # fresh nonce
    assert first.wrapped_key != second.wrapped_key  # fresh data key


def test_wrong_kek_is_refused(sealed: Sealed) -> None:
    other = AesGcmCipher(bytes(reversed(KEK)))
    assert_broken(lambda: other.open(sealed, scope=SCOPE, candidate_id=CANDIDATE))


def test_every_flipped_ciphertext_byte_is_refused(cipher: AesGcmCipher) -> None:
    sealed = cipher.seal(b"short body", scope=SCOPE, candidate_id=CANDIDATE)
    for i in range(len(sealed.ciphertext)):
        tampered = bytearray(sealed.ciphertext)
        tampered[i] ^= 0x01
        broken = replace(sealed, ciphertext=bytes(tampered))
        assert_broken(functools.partial(cipher.open, broken, scope=SCOPE, candidate_id=CANDIDATE))


def test_every_flipped_wrapped_key_byte_is_refused(cipher: AesGcmCipher, sealed: Sealed) -> None:
    for i in range(len(sealed.wrapped_key)):
        tampered = bytearray(sealed.wrapped_key)
        tampered[i] ^= 0x80
        broken = replace(sealed, wrapped_key=bytes(tampered))
        assert_broken(functools.partial(cipher.open, broken, scope=SCOPE, candidate_id=CANDIDATE))


@pytest.mark.parametrize(
    ("scope", "candidate_id"),
    [
        (Scope("tenant-b", SCOPE.workspace), CANDIDATE),
        (Scope(SCOPE.tenant, "workspace-2"), CANDIDATE),
        (SCOPE, "candidate_" + "cd" * 32),
        # Same concatenation, different split: the length prefixes keep these apart.
        (Scope("tenant-aw", "orkspace-1"), CANDIDATE),
        (Scope("tenant-", "aworkspace-1"), CANDIDATE),
        (Scope(SCOPE.workspace, SCOPE.tenant), CANDIDATE),
    ],
)
def test_other_scope_or_candidate_is_refused(
    cipher: AesGcmCipher, sealed: Sealed, scope: Scope, candidate_id: str
) -> None:
    assert_broken(lambda: cipher.open(sealed, scope=scope, candidate_id=candidate_id))


def test_length_prefixes_make_the_associated_data_unambiguous(cipher: AesGcmCipher) -> None:
    sealed = cipher.seal(PLAINTEXT, scope=Scope("a", "bc"), candidate_id="d")
    assert_broken(lambda: cipher.open(sealed, scope=Scope("ab", "c"), candidate_id="d"))
    assert_broken(lambda: cipher.open(sealed, scope=Scope("a", "b"), candidate_id="cd"))


def test_swapped_wrapped_keys_are_refused(cipher: AesGcmCipher) -> None:
    first = cipher.seal(PLAINTEXT, scope=SCOPE, candidate_id=CANDIDATE)
    second = cipher.seal(PLAINTEXT, scope=SCOPE, candidate_id=CANDIDATE)
    mixed = Sealed(ciphertext=first.ciphertext, wrapped_key=second.wrapped_key)
    assert_broken(lambda: cipher.open(mixed, scope=SCOPE, candidate_id=CANDIDATE))


@pytest.mark.parametrize("keep", [0, 1, 12, 13, 28, 29, -1])
def test_truncated_ciphertext_is_refused(cipher: AesGcmCipher, sealed: Sealed, keep: int) -> None:
    broken = replace(sealed, ciphertext=sealed.ciphertext[:keep])
    assert_broken(lambda: cipher.open(broken, scope=SCOPE, candidate_id=CANDIDATE))


@pytest.mark.parametrize("wrapped_key", [b"", b"\x00" * 8, "cut", "extended"])
def test_wrapped_key_of_the_wrong_length_is_refused(
    cipher: AesGcmCipher, sealed: Sealed, wrapped_key: bytes | str
) -> None:
    if wrapped_key == "cut":
        wrapped_key = sealed.wrapped_key[:-8]
    elif wrapped_key == "extended":
        wrapped_key = sealed.wrapped_key + b"\x00" * 8
    assert isinstance(wrapped_key, bytes)
    broken = replace(sealed, wrapped_key=wrapped_key)
    assert_broken(lambda: cipher.open(broken, scope=SCOPE, candidate_id=CANDIDATE))


@pytest.mark.parametrize("version", [0x00, 0x02, 0xFF])
def test_unknown_format_version_is_refused(cipher: AesGcmCipher, sealed: Sealed, version: int) -> None:
    broken = replace(sealed, ciphertext=bytes((version,)) + sealed.ciphertext[1:])
    assert_broken(lambda: cipher.open(broken, scope=SCOPE, candidate_id=CANDIDATE))


def test_non_bytes_and_unencodable_ids_are_refused(cipher: AesGcmCipher, sealed: Sealed) -> None:
    broken = Sealed(ciphertext=None, wrapped_key=sealed.wrapped_key)  # type: ignore[arg-type]  # not bytes: the case under test
    assert_broken(lambda: cipher.open(broken, scope=SCOPE, candidate_id=CANDIDATE))
    assert_broken(lambda: cipher.open(sealed, scope=SCOPE, candidate_id="\ud800"))


@pytest.mark.parametrize("kek", [b"", b"\x00" * 16, b"\x00" * 24, b"\x00" * 33, "0" * 32])
def test_only_a_32_byte_kek_is_accepted(kek: object) -> None:
    with pytest.raises(ValueError, match="key-encryption key must be exactly"):
        AesGcmCipher(kek)  # type: ignore[arg-type]  # a str key is among the cases


def test_repr_does_not_show_the_kek(cipher: AesGcmCipher) -> None:
    assert KEK.hex() not in repr(cipher) and str(KEK) not in repr(cipher)
    assert "redacted" in repr(cipher)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX file modes")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_write_kek_creates_a_0600_file_of_32_bytes(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "kek.bin"
    previous = os.umask(umask)
    try:
        kek = write_kek(path)
    finally:
        os.umask(previous)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(kek) == 32 and path.read_bytes() == kek
    assert load_kek(path) == kek
    sealed = AesGcmCipher(load_kek(path)).seal(PLAINTEXT, scope=SCOPE, candidate_id=CANDIDATE)
    assert AesGcmCipher(kek).open(sealed, scope=SCOPE, candidate_id=CANDIDATE) == PLAINTEXT


def test_write_kek_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "kek.bin"
    first = write_kek(path)
    with pytest.raises(FileExistsError):
        write_kek(path)
    assert path.read_bytes() == first


def test_two_keks_differ(tmp_path: Path) -> None:
    assert write_kek(tmp_path / "a") != write_kek(tmp_path / "b")


@pytest.mark.parametrize(
    "content",
    [b"", b"\x01" * 31, b"\x01" * 33, b"DATABASE_PASSWORD=do-not-echo-me-please-0123456789\n"],
)
def test_load_kek_refuses_a_file_of_the_wrong_size_without_echoing_it(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "kek.bin"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="exactly 32 bytes") as caught:
        load_kek(path)
    message = str(caught.value)
    if content:
        assert content.decode("latin-1") not in message
        assert "do-not-echo" not in message
        assert content.hex() not in message
