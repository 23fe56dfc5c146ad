"""The floors of the code: keras_transformer <- export <- pipelines, every import pointing down
(imports inside functions included)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("keras_transformer", "export", "pipelines")  # each may import only those before it


def imported_packages(path: Path, package: str) -> set[str]:
    """The top-level packages that the import statements of `package`'s module `path` name,
    wherever they stand (a relative import names `package`)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add(package if node.level else node.module.split(".")[0])
    return names


@pytest.mark.parametrize("floor", FLOORS)
def test_imports_point_down(floor):
    above = set(FLOORS[FLOORS.index(floor) + 1:])
    modules = sorted((ROOT / floor).rglob("*.py"))
    assert modules
    upward = {str(path.relative_to(ROOT)): sorted(imported_packages(path, floor) & above)
              for path in modules}
    assert {path: names for path, names in upward.items() if names} == {}


def test_an_import_inside_a_function_is_seen(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("import json\n\n\ndef f():\n    from pipelines.config import load_config\n"
                      "    import export.onnx\n    from . import sibling\n")
    assert imported_packages(module, "keras_transformer") == {
        "json", "pipelines", "export", "keras_transformer"}
