"""The prompts both capture paths send: seeded random token ids (same seed, same prompt)."""

from __future__ import annotations

import random


def random_prompt(n_tokens: int, *, vocab_size: int, seed: int) -> list[int]:
    """``n_tokens`` token ids drawn uniformly from [10, vocab_size) by a generator seeded with (seed, n_tokens).

    Ids below 10 are avoided (special tokens in most vocabularies). Same arguments, same prompt.
    """
    rng = random.Random(f"phaseprof:{seed}:{n_tokens}")
    hi = max(vocab_size, 11)
    return [rng.randrange(10, hi) for _ in range(n_tokens)]
