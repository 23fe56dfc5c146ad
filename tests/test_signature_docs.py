"""The docs' tables of the serving signatures agree with the code's table
(`export.translator.signatures.SIGNATURES`): in README.md and ARCHITECTURE.md, the markdown
table under the heading "Serving signatures" (any level) has one row per signature, each row
starting with "| `NAME` |"."""
import re
from pathlib import Path

import pytest

from export.translator.signatures import SIGNATURES

ROOT = Path(__file__).resolve().parents[1]
HEADING = re.compile(r"#+\s+Serving signatures\s*")
ROW = re.compile(r"\|\s*`([^`]+)`\s*\|")


def documented_signatures(markdown: str) -> list[str] | None:
    """The names of the rows of the first table under the heading "Serving signatures"; None
    when no heading says so."""
    lines = markdown.splitlines()
    starts = [index for index, line in enumerate(lines) if HEADING.fullmatch(line.strip())]
    if not starts:
        return None
    names, in_table = [], False
    for line in lines[starts[0] + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            in_table = True
            row = ROW.match(line)
            if row:
                names.append(row.group(1))
        elif in_table:
            break
    return names


def test_the_reader_takes_the_rows_of_the_table_under_the_heading():
    markdown = ("# Title\n| `not_this` | x |\n## Serving signatures\n\nText.\n\n"
                "| signature | inputs |\n|---|---|\n| `a` | `text` |\n| `b` | `text` |\n\n"
                "| `after` | the table |\n")
    assert documented_signatures(markdown) == ["a", "b"]
    assert documented_signatures("## Serving signatures of old\n| `a` |\n") is None


@pytest.mark.parametrize("document", ["README.md", "ARCHITECTURE.md"])
def test_the_docs_list_the_codes_serving_signatures(document):
    names = documented_signatures((ROOT / document).read_text(encoding="utf-8"))
    assert names is not None, f"{document}: no table under a heading 'Serving signatures'"
    assert sorted(names) == sorted(SIGNATURES), document  # each once
