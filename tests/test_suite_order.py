"""The suite's own order (tests/conftest.py): every file SLOWEST_FILES names exists, so that a
renamed file does not drop silently to the end of the run."""
from pathlib import Path

from conftest import SLOWEST_FILES


def test_the_slowest_files_exist_and_are_named_once():
    tests = Path(__file__).parent
    assert [name for name in SLOWEST_FILES if not (tests / name).is_file()] == []
    assert len(set(SLOWEST_FILES)) == len(SLOWEST_FILES)
