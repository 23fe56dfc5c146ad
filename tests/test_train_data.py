"""pipelines/training/train_data.py: the token budget checked against the replicas that split it."""
from pathlib import Path

import pytest

from pipelines import InputError
from pipelines.config import load_config
from pipelines.training.train_data import check_batch_tokens
from tiny_run import make_tiny_run


def test_the_budget_must_hold_a_longest_pair_in_every_replica(tmp_path: Path) -> None:
    config = load_config(make_tiny_run(tmp_path))  # max_length 40, batch_tokens 320
    check_batch_tokens(config, replicas=8)  # 8 x 40 = 320: fits
    with pytest.raises(InputError, match=r"^train.batch_tokens: must be at least 360 so that "
                       r"each of 9 replica\(s\) holds a pair of data.max_length \(40\) tokens "
                       r"padded to its length bucket \(9 x 40\), got 320$"):
        check_batch_tokens(config, replicas=9)
