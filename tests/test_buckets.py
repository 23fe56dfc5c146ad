"""pipelines/training/buckets.py: the length buckets and the token budget they need."""
from pipelines.training.buckets import bucket_boundaries, smallest_batch_tokens


def test_bucket_boundaries():
    assert bucket_boundaries(128) == (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 120, 128)
    assert bucket_boundaries(20) == (8, 16, 24)
    assert bucket_boundaries(256)[-1] == 256


def test_the_budget_holds_a_longest_pair_per_replica():
    assert smallest_batch_tokens(128) == 128
    assert smallest_batch_tokens(130) == 136  # 130 tokens pad to the 136 bucket
    assert smallest_batch_tokens(130, replicas=4) == 544
