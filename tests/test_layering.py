"""The floors of the code: keras_transformer <- export <- pipelines, every import pointing down,
and inside pipelines: helpers <- a run's parts <- the stages and commands that orchestrate them
(imports inside functions included)."""
import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FLOORS = ("keras_transformer", "export", "pipelines")  # each may import only those before it

# Inside pipelines/, the floors by unit (a top-level module, or a sub-package whole), lowest
# first: a unit imports only units of its own floor and of those before it.
PIPELINES_FLOORS = (
    # Helpers that know nothing of a run: the error types, files, YAML, progress, the GPU probe,
    # the translate command's streaming, markup and glossary.
    ("pipelines", "pipelines.files", "pipelines.gpu", "pipelines.startup", "pipelines.progress",
     "pipelines.yaml_dataclasses", "pipelines.translate_stream", "pipelines.translate_markup",
     "pipelines.translate_glossary"),
    # A run's parts: its map, its config, its corpus, its checkpoints, its model, its training.
    ("pipelines.paths", "pipelines.config", "pipelines.corpus", "pipelines.checkpoints",
     "pipelines.models", "pipelines.training"),
    # What orchestrates them: the stages that are top-level modules, `run`, the commands.
    ("pipelines.average", "pipelines.evaluate", "pipelines.export", "pipelines.run",
     "pipelines.cli", "pipelines.doctor", "pipelines.visualize", "pipelines.translate_command",
     "pipelines.score_command"),
)
# Parts that average, evaluate and export read: they never pull in the training loop or the
# corpus, which import them.
NEVER_IMPORTED_BY = {"pipelines.checkpoints": ("pipelines.training", "pipelines.corpus"),
                     "pipelines.models": ("pipelines.training", "pipelines.corpus")}
UNITS = [unit for floor in PIPELINES_FLOORS for unit in floor]


def module_name(path: Path) -> str:
    """The dotted name of the module at `path` (a package's: its __init__.py)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, module: str) -> set[str]:
    """The dotted names that the import statements of module `module` (file `path`) may name,
    wherever they stand: `from A import b` names A and A.b (b may be a module); a relative
    import is resolved against the module's package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize("floor", FLOORS)
def test_imports_point_down(floor):
    above = set(FLOORS[FLOORS.index(floor) + 1:])
    modules = sorted((ROOT / floor).rglob("*.py"))
    assert modules
    upward = {str(path.relative_to(ROOT)): sorted(
        {name.split(".")[0] for name in imported_modules(path, module_name(path))} & above)
        for path in modules}
    assert {path: names for path, names in upward.items() if names} == {}


def test_an_import_inside_a_function_is_seen(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("import json\n\n\ndef f():\n    from pipelines.config import load_config\n"
                      "    import export.onnx\n    from . import sibling\n")
    assert {name.split(".")[0] for name in imported_modules(module, "keras_transformer.module")} \
        == {"json", "pipelines", "export", "keras_transformer"}


def unit_of(name: str) -> str | None:
    """The unit of PIPELINES_FLOORS that the dotted name belongs to (the longest prefix)."""
    matches = [unit for unit in UNITS if name == unit or name.startswith(f"{unit}.")]
    return max(matches, key=len, default=None)


def floor_of(unit: str) -> int:
    return next(index for index, floor in enumerate(PIPELINES_FLOORS) if unit in floor)


def pipelines_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted((ROOT / "pipelines").rglob("*.py"))}


def test_every_unit_of_pipelines_has_a_floor():
    units = {".".join(name.split(".")[:2]) for name in pipelines_modules()}
    assert units == set(UNITS)
    assert len(UNITS) == len(set(UNITS))


def test_pipelines_imports_point_down_its_floors():
    upward = {}
    for module, path in pipelines_modules().items():
        unit = unit_of(module)
        units = {unit_of(name) for name in imported_modules(path, module)} - {None, unit}
        above = sorted(name for name in units if floor_of(name) > floor_of(unit))
        forbidden = sorted(name for name in units if name in NEVER_IMPORTED_BY.get(unit, ()))
        if above or forbidden:
            upward[module] = above + forbidden
    assert upward == {}


def test_pipelines_floors_see_relative_and_function_level_imports(tmp_path):
    module = tmp_path / "module.py"
    module.write_text("from pipelines import gpu, InputError\n\n\ndef f():\n"
                      "    from pipelines.run import run\n    from . import sibling\n"
                      "    from ..config import load_config\n")
    names = imported_modules(module, "pipelines.training.module")
    assert {"pipelines.gpu", "pipelines.run", "pipelines.training.sibling",
            "pipelines.config.load_config"} <= names
    assert {unit_of(name) for name in names} == {
        "pipelines", "pipelines.gpu", "pipelines.run", "pipelines.training", "pipelines.config"}
