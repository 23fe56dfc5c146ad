"""The length buckets of training batches and the one rule they set on the token budget
(`batch_tokens_problem`), in a light module: the config checks it where it loads (1 replica),
train against its replicas, the input pipeline where it batches.

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


def smallest_batch_tokens(max_length: int, replicas: int = 1,
                          boundaries: tuple[int, ...] | None = None) -> int:
    """The least `train.batch_tokens` (over all replicas) whose per-replica share holds one pair
    of the longest bucket: replicas x max_length rounded up to its bucket (the last of
    `boundaries`, default `bucket_boundaries(max_length)`)."""
    return replicas * (boundaries or bucket_boundaries(max_length))[-1]


def batch_tokens_problem(batch_tokens: int, max_length: int, replicas: int = 1,
                         boundaries: tuple[int, ...] | None = None) -> str | None:
    """Why `batch_tokens` split over `replicas` cannot batch pairs of up to `max_length` tokens
    (data.max_length), or None when it can: the one message of the rule, which the config
    (1 replica), train (its replicas) and the input pipeline (its batches) each raise.

    Example:
        >>> batch_tokens_problem(320, 40, replicas=8) is None
        True
        >>> batch_tokens_problem(256, 40, replicas=8)[:51]
        'must be at least 320 so that each of 8 replica(s) h'
    """
    longest = (boundaries or bucket_boundaries(max_length))[-1]
    smallest = smallest_batch_tokens(max_length, replicas, boundaries)
    if batch_tokens >= smallest:
        return None
    return (f"must be at least {smallest} so that each of {replicas} replica(s) holds a pair of "
            f"data.max_length ({max_length}) tokens padded to its length bucket ({replicas} x "
            f"{longest}), got {batch_tokens!r}")
