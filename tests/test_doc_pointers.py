"""Pointers from the code to the docs name sections that exist (issue 45).

A pointer in a source file (a docstring, a comment, a config's comment) has one form: a file,
then optionally a comma and the heading of one of its sections in straight double quotes,
which may wrap onto the next line (a comment's `#` there is skipped):

    README.md          docs/serving.md          docs/recipes.md, "Model size for the budget"

The file is README.md, ARCHITECTURE.md or docs/NAME.md, from the repository's root; the
heading is compared exactly with the markdown headings (any level, outside fenced code) after
stripping the `#`s and spaces. Any other mention (a bare README, a heading without the comma
or in other quotes, an unquoted heading, an anchor, a docs/ path that is not a .md file) fails
with its file:line, so that a pointer cannot slip past the check in a form it does not parse.

Links in README.md, ARCHITECTURE.md and docs/*.md (`[text](path#anchor)`) name existing files,
and their anchors headings of the target by GitHub's slug rule.

Every module of the packages (`__init__.py` aside) has a module docstring with an example
(issue 45): what it owns, its contract, then `Example:` or a doctest.
"""
import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_DIRS = ("keras_transformer", "export", "pipelines", "bench", "tests")
SOURCE_SUFFIXES = {".py", ".yaml", ".yml", ".txt", ".config", ".cfg", ".ini", ".toml"}
ROOT_FILES = ("Makefile", "setup.py", "pytest.ini")

# A line break inside a pointer, with the next line's indentation and comment leader.
BREAK = r"[ \t]*(?:\n[ \t]*#?)?[ \t]*"
DOC = r"(?<![\w/.])(?P<file>(?:README|ARCHITECTURE|docs/[\w-]+)\.md)\b"
POINTER = re.compile(DOC + r'(?:,' + BREAK + r'"(?P<heading>[^"\n]+(?:\n[ \t]*#?[^"\n]*)*?)")?')
# What follows a file when a heading was meant in another form: no comma, other quotes, a
# colon, an unquoted capitalized heading, a markdown anchor.
MALFORMED_TAIL = re.compile(r"#\w|" + BREAK + r"""[,:]?""" + BREAK + r"""["“”'‘](?=\w)|,"""
                            + BREAK + r"[A-Z]")
BARE_README = re.compile(r"\bREADME\b(?!\.md)")
OTHER_DOCS_PATH = re.compile(r"(?<![\w/.])docs/(?![\w-]+\.md\b)")
PACKAGES = ("keras_transformer", "export", "pipelines")
FENCE = re.compile(r"^[ \t]*(```|~~~)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def source_files() -> list[Path]:
    """Every source and config file outside docs/ that may point at the docs (this one aside:
    its patterns would match themselves)."""
    files = [ROOT / name for name in ROOT_FILES] + sorted(ROOT.glob("constraints*.txt"))
    for directory in SOURCE_DIRS:
        files += sorted(path for path in (ROOT / directory).rglob("*")
                        if path.suffix in SOURCE_SUFFIXES and path.is_file()
                        and "__pycache__" not in path.parts)
    return [path for path in files if path.is_file() and path != Path(__file__).resolve()]


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md"] + sorted((ROOT / "docs").glob("*.md"))


def _outside_fences(text: str) -> list[str]:
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def headings(path: Path) -> list[str]:
    """A markdown file's headings, `#`s and surrounding spaces stripped."""
    return [" ".join(line.lstrip("#").split()) for line in _outside_fences(path.read_text())
            if re.match(r"#{1,6}\s", line)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation but '-' and '_' removed, spaces to
    '-'."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for heading in headings(path):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def pointer_problems(paths: list[Path], root: Path = ROOT) -> list[str]:
    """`file:line: problem` for every pointer in `paths` naming a missing file or heading, and
    every README or docs/ mention not in the pointer form."""
    problems = []
    for path in paths:
        text = path.read_text(errors="replace")
        where = lambda offset: f"{path}:{text.count(chr(10), 0, offset) + 1}"  # noqa: E731
        parsed = set()
        for match in POINTER.finditer(text):
            parsed.add(match.start())
            target = root / match["file"]
            tail = text[match.end():match.end() + 80]
            if match["heading"] is None and MALFORMED_TAIL.match(tail):
                problems.append(f"{where(match.start())}: not the pointer form "
                                f'(FILE.md, "Heading"): {match[0] + tail.splitlines()[0]!r}')
            elif not target.is_file():
                problems.append(f"{where(match.start())}: no file {match['file']}")
            elif match["heading"] is not None:
                heading = " ".join(re.sub(r"\n[ \t]*#?", " ", match["heading"]).split())
                if heading not in headings(target):
                    problems.append(f'{where(match.start())}: {match["file"]} has no heading '
                                    f'"{heading}"')
        for pattern in (BARE_README, OTHER_DOCS_PATH):
            for match in pattern.finditer(text):
                if match.start() not in parsed:
                    line = text[text.rfind("\n", 0, match.start()) + 1:].split("\n")[0]
                    problems.append(f"{where(match.start())}: not the pointer form "
                                    f'(FILE.md, "Heading"): {line.strip()!r}')
    return sorted(problems, key=lambda problem: (problem.split(":")[0],
                                                 int(problem.split(":")[1])))


def link_problems(paths: list[Path]) -> list[str]:
    """`file:line: problem` for every relative markdown link in `paths` naming a missing file,
    or an anchor that is not a heading of its target."""
    problems = []
    for path in paths:
        fenced = False
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if FENCE.match(line):
                fenced = not fenced
            if fenced or FENCE.match(line):
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # https:, mailto:
                    continue
                file, _, anchor = target.partition("#")
                resolved = (path.parent / file).resolve() if file else path
                if not resolved.exists():
                    problems.append(f"{path}:{number}: no file {file}")
                elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                    problems.append(f"{path}:{number}: {file or path.name} has no heading "
                                    f"#{anchor}")
    return problems


def test_every_pointer_names_an_existing_file_and_heading():
    assert pointer_problems(source_files()) == []


def test_every_link_in_the_docs_names_an_existing_file_and_heading():
    assert link_problems(markdown_files()) == []


def test_the_scan_finds_a_wrong_heading_and_a_pointer_it_cannot_parse(tmp_path):
    good = tmp_path / "good.py"
    good.write_text('"""(docs/recipes.md, "Model size\n    for the budget"), README.md.\n"""\n'
                    '# (docs/serving.md, "CTranslate2"; see\n# docs/alignments.md, "Alignment\n'
                    '# error rate")\n')
    assert pointer_problems([good]) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text('# ok: docs/recipes.md, "Recipes that learn fast"\n'
                   '# (docs/recipes.md, "Model size for a budget")\n'
                   '# (docs/nothing.md)\n'
                   '# (README "Serving")\n'
                   '# (docs/serving.md "CTranslate2")\n'
                   '# (docs/serving.md, CTranslate2)\n'
                   '# (docs/serving.md#ctranslate2)\n'
                   '# (the README\'s Zen 4)\n')
    problems = pointer_problems([bad])
    assert [problem.split(":")[1] for problem in problems] == [
        "2", "3", "4", "5", "6", "7", "8"], problems
    assert 'no heading "Model size for a budget"' in problems[0]


def test_the_link_check_finds_a_missing_file_and_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# A page\n\n## Its `section`, here\n")
    (tmp_path / "b.md").write_text("[ok](a.md#its-section-here) [ok](#b)\n# B\n"
                                   "[missing](c.md) [bad anchor](a.md#its-section)\n"
                                   "```\n[in code](nowhere.md)\n```\n")
    problems = link_problems([tmp_path / "a.md", tmp_path / "b.md"])
    assert [problem.split(":")[-2:] for problem in problems] == [
        ["3", " no file c.md"], ["3", " a.md has no heading #its-section"]], problems


def modules_without_example(paths: list[Path]) -> list[str]:
    """The files of `paths` whose module docstring is missing or has neither "Example" nor a
    doctest (">>>")."""
    lacking = []
    for path in paths:
        docstring = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
        if "Example" not in docstring and ">>>" not in docstring:
            lacking.append(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path))
    return lacking


def package_modules() -> list[Path]:
    return [path for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            if path.name != "__init__.py" and "__pycache__" not in path.parts]


def test_every_module_docstring_has_an_example():
    assert modules_without_example(package_modules()) == []


def test_the_example_check_names_the_modules_that_lack_one(tmp_path):
    (tmp_path / "example.py").write_text('"""Owns x.\n\nExample:\n    x()\n"""\n')
    (tmp_path / "doctest.py").write_text('"""Owns y.\n\n    >>> y()\n"""\n')
    (tmp_path / "summary.py").write_text('"""Owns z, no example."""\n')
    (tmp_path / "none.py").write_text('EXAMPLE = "not a docstring"\n')
    lacking = modules_without_example(sorted(tmp_path.glob("*.py")))
    assert lacking == [str(tmp_path / "none.py"), str(tmp_path / "summary.py")], lacking
