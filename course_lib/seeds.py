"""Seeds: one rule for every seed the library derives (a base seed and a path of keys give one stream's seed),
and ``seed_everything``, which seeds Python, numpy and torch at once.

A run that needs several random streams (one per rank, per epoch, per round, per cross-validation fold) must give
each its own, and no two of them the same: ``seed + rank`` gives rank 1 of seed 0 the stream of rank 0 of seed 1,
and ``seed * 100_003 + epoch`` gives an epoch's shuffle the same stream as a rank's dropout. ``derive`` hands the
base seed and the keys to numpy's ``SeedSequence``, which hashes them into well-mixed entropy (O'Neill's PCG seeding
scheme, the one numpy documents for spawning independent streams), so different paths give unrelated seeds. A
string key names what the stream is for (``"epoch"``, ``"rank"``), so an epoch and a rank with the same number still
get different streams.
"""

from __future__ import annotations

import random
import zlib

import numpy as np
import torch

from . import arguments

_MAX_KEY = 2**64 - 1  # seeds and integer keys are written as two 32-bit words


def derive(seed: int, *keys: int | str) -> int:
    """The seed of the stream that ``keys`` name, under the base ``seed``.

    The same arguments give the same seed on every machine and Python run (no salted ``hash``); a different base seed
    or any different key gives an unrelated one. Keys are integers in [0, 2**64) (a rank, an epoch) or strings that
    say what the stream is for.
    """
    # every path is written at a fixed width, its length first, each key tagged with its kind: numpy pads short
    # entropy with zeros and splits large integers into 32-bit words, so (5,) and (5, 0), or (2**32,) and (0, 1),
    # would otherwise hash alike
    seed = arguments.integer("seed", seed, minimum=0, maximum=_MAX_KEY)
    entropy = [len(keys), *_words(seed)]
    for i, key in enumerate(keys):
        if isinstance(key, str):
            entropy += [1, zlib.crc32(key.encode()), len(key)]
        else:
            entropy += [0, *_words(arguments.integer(f"keys[{i}]", key, minimum=0, maximum=_MAX_KEY))]
    # 32 bits: every generator takes them (numpy's legacy ``np.random.seed`` and scikit-learn's ``random_state``
    # stop at 2**32 - 1); two of a run's few hundred streams share one with odds of about 1 in 10**5
    return int(np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint32)[0])


def _words(value: int) -> tuple[int, int]:
    return value & 0xFFFF_FFFF, value >> 32


def seed_everything(seed: int = 0) -> int:
    """Seed Python, numpy and torch (all devices) so deterministic cells repeat exactly."""
    arguments.nonnegative_int("seed", seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds CUDA and MPS generators
    return seed
