"""Synthetic memory text: sentences over a fixed, seeded vocabulary with Zipf-like word frequencies.

The same seed always yields the same words, so cached stores and the queries run against them agree.
One marker word appears in about a fifth of the records, for the broad-query measure.
"""

from __future__ import annotations

import itertools
import random

SEED = 20261130
VOCABULARY_SIZE = 4000
MARKER = "quorum"  # present in ~MARKER_SHARE of records; never drawn as an ordinary word
MARKER_SHARE = 0.2
SENTENCE_WORDS = (6, 14)
_ONSETS = ["b", "c", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "pl", "gr"]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ou"]


def vocabulary() -> list[str]:
    """Distinct pronounceable words of 2-3 syllables, in rank order (rank 1 is the most frequent)."""
    rng = random.Random(SEED)
    words: list[str] = []
    seen = {MARKER}
    while len(words) < VOCABULARY_SIZE:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(rng.choice((2, 3))))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


class TextSource:
    """Record texts and search queries drawn from one vocabulary."""

    def __init__(self, seed: int = SEED) -> None:
        self.words = vocabulary()
        self._weights = list(itertools.accumulate(1.0 / rank ** 1.07 for rank in range(1, len(self.words) + 1)))
        self._rng = random.Random(seed)

    def sentence(self) -> str:
        rng = self._rng
        count = rng.randint(*SENTENCE_WORDS)
        words = rng.choices(self.words, cum_weights=self._weights, k=count)
        if rng.random() < MARKER_SHARE:
            words[rng.randrange(count)] = MARKER
        return " ".join(words).capitalize() + "."

    def query(self) -> str:
        """One to three words, Zipf-weighted like the texts (so most queries match something)."""
        return " ".join(self._rng.choices(self.words, cum_weights=self._weights, k=self._rng.randint(1, 3)))
