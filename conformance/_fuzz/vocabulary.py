"""Names and characters the argument cases are written with.

Shared by the fuzzer and by tools/make_fixtures.py. Standard library only, and
no contract logic: the fixture corpus must stay independent of the code it tests.
"""

from __future__ import annotations

SEARCH = "engram_memory_search"
GET = "engram_memory_get"
CAPTURE = "engram_memory_capture"
ADMIT = "engram_memory_request_admission"
WITHDRAW = "engram_memory_withdraw"
FORGET = "engram_memory_forget"
TOOLS = (SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET)

# One NFC character of each UTF-8 width.
C1 = "a"  # U+0061, 1 byte
C2 = "\u00e9"  # U+00E9 LATIN SMALL LETTER E WITH ACUTE, 2 bytes
C3 = "\u20ac"  # U+20AC EURO SIGN, 3 bytes
C4 = "\U0001f600"  # U+1F600 GRINNING FACE, 4 bytes
WIDE = {1: C1, 2: C2, 3: C3, 4: C4}

NFD_E = "e\u0301"  # e + U+0301 COMBINING ACUTE ACCENT: the NFD spelling of U+00E9
ANGSTROM = "\u212b"  # U+212B ANGSTROM SIGN: NFC maps it to U+00C5
JAMO = "\u1100\u1161"  # conjoining jamo: NFC composes them to U+AC00

# Two well-formed digests that name nothing.
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
