"""pipelines/startup.py: TensorFlow's start-up log lines filtered, other stderr output kept."""
import os
import sys

import pytest

from pipelines.startup import (YOUNG_COLLECTION_EVERY, filtered_stderr,
                               import_tensorflow_quietly, is_noise, matplotlib_held_back,
                               tune_garbage_collector)

ONEDNN = (b"I0000 00:00:1795455983.230309    4603 port.cc:153] oneDNN custom operations are on. "
          b"You may see slightly different numerical results\n")
NOTICE = (b"WARNING: All log messages before absl::InitializeLog() is called are written to "
          b"STDERR\n")
CUINIT = (b"E0000 00:00:1795455986.769832    4603 cuda_platform.cc:52] failed call to cuInit: "
          b"INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)\n")
WARNING = b"W0000 00:00:1795455986.769832    4603 op_kernel.cc:1857] something to know\n"
ERROR = b"E0000 00:00:1795455986.769832    4603 util.cc:131] something went wrong\n"


@pytest.mark.parametrize("line, min_level, nvidia, noise", [
    (ONEDNN, 2, False, True), (ONEDNN, 1, False, True), (ONEDNN, 0, False, False),
    (NOTICE, 2, False, True), (NOTICE, 0, False, False),
    (CUINIT, 2, False, True), (CUINIT, 0, False, True), (CUINIT, 2, True, False),
    (WARNING, 2, False, True), (WARNING, 1, False, False),
    (ERROR, 2, False, False), (ERROR, 3, False, True),
    (b"Traceback (most recent call last):\n", 3, False, False),
    (b"terminate called after throwing an instance of 'dnnl::error'\n", 3, False, False),
])
def test_is_noise(line, min_level, nvidia, noise):
    assert is_noise(line, min_level, nvidia) is noise


def test_filtered_stderr_drops_only_the_rejected_lines(capfd):
    with filtered_stderr(lambda line: line.startswith(b"drop")):
        os.write(2, b"drop me\nkeep native\n")
        print("keep python", file=sys.stderr)
        os.write(2, b"drop me too\n")
    assert sorted(capfd.readouterr().err.splitlines()) == ["keep native", "keep python"]


def test_filtered_stderr_writes_back_when_the_block_raises(capfd):
    with pytest.raises(RuntimeError), filtered_stderr(lambda line: False):
        os.write(2, b"before the error\n")
        raise RuntimeError
    print("after", file=sys.stderr)
    assert capfd.readouterr().err == "before the error\nafter\n"


def test_import_tensorflow_quietly_leaves_tensorflow_imported():
    import_tensorflow_quietly()
    assert "tensorflow" in sys.modules


def test_matplotlib_is_held_back_within_the_block_alone(monkeypatch):
    import importlib.util

    monkeypatch.delitem(sys.modules, "matplotlib", raising=False)  # as before any import
    with matplotlib_held_back():
        with pytest.raises(ImportError):
            import matplotlib  # noqa: F401
    assert "matplotlib" not in sys.modules and importlib.util.find_spec("matplotlib")
    monkeypatch.setitem(sys.modules, "matplotlib", sys)  # imported before (any module will do)
    with matplotlib_held_back():
        import matplotlib  # noqa: F811
    assert matplotlib is sys and sys.modules["matplotlib"] is sys


def test_the_tuned_collector_still_collects_cycles_unasked():
    """Once per process (conftest, as the CLI, after TensorFlow's import): the start-up's
    objects frozen, young collections every YOUNG_COLLECTION_EVERY allocations; a cycle made
    afterwards is collected without a gc.collect() once that many objects were allocated."""
    import gc
    import weakref

    tune_garbage_collector()
    tune_garbage_collector()  # a second call changes nothing
    assert gc.get_threshold()[0] == YOUNG_COLLECTION_EVERY and gc.get_freeze_count() > 0

    class Node:
        pass

    gc.collect(0)  # the young generation's count back to 0
    node = Node()
    node.self = node  # a reference cycle: refcounting alone never frees it
    alive = weakref.ref(node)
    del node
    kept = [[] for _ in range(YOUNG_COLLECTION_EVERY // 2)]
    assert alive() is not None  # not yet: fewer allocations than the threshold
    kept += [[] for _ in range(2 * YOUNG_COLLECTION_EVERY)]
    assert alive() is None and len(kept) == 5 * YOUNG_COLLECTION_EVERY // 2
