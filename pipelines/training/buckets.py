"""The length buckets of training batches and the one rule they set on the token budget, in a
light module: the config checks it where it is loaded, the input pipeline where it batches.

Example:
    >>> bucket_boundaries(130)[-1], smallest_batch_tokens(130, replicas=2)
    (136, 272)
"""
from __future__ import annotations

import math


def bucket_boundaries(max_length: int, *, step: int = 8, linear_until: int = 64,
                      growth: float = 1.2) -> tuple[int, ...]:
    """Padded lengths of the buckets: multiples of `step` up to `linear_until`, then growing
    by `growth` (rounded up to `step`), the last covering `max_length`.

    Example:
        >>> bucket_boundaries(128)
        (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 120, 128)
    """
    top = step * math.ceil(max_length / step)
    bounds = list(range(step, min(linear_until, top) + 1, step))
    while bounds[-1] < top:
        bounds.append(min(top, step * math.ceil(bounds[-1] * growth / step)))
    return tuple(bounds)


def smallest_batch_tokens(max_length: int, replicas: int = 1) -> int:
    """The least `train.batch_tokens` (over all replicas) whose per-replica share holds one pair
    of the longest bucket: replicas x max_length rounded up to its bucket."""
    return replicas * bucket_boundaries(max_length)[-1]
