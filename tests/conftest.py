"""Shared fixture: the demo corpus prepared once per session (about 10 s)."""
import dataclasses

import pytest

from pipelines.config import load_config
from pipelines.prepare import PrepareSummary, prepare


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> PrepareSummary:
    """`prepare demo` (bible:en-fr, 8000 BPE pieces) written under a temporary run_dir."""
    config = load_config("demo")
    run_dir = tmp_path_factory.mktemp("runs") / "demo"
    return prepare(dataclasses.replace(config, run_dir=str(run_dir)))
