"""A bench/ script imported as a module, for the tests of its functions."""
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def bench_script(name: str) -> ModuleType:
    """bench/NAME.py executed as the module NAME (registered in sys.modules first, so that its
    dataclasses and the pytest plugin name resolve)."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
