"""The NMT pipeline: the stages (prepare, train, average, evaluate, export), each a function with
explicit inputs and outputs, the `run` that chains them and the CLI; and the errors the CLI
prints as one line. Its floors (helpers <- a run's parts <- the stages and commands):
ARCHITECTURE.md, tests/test_layering.py.

Example:
    >>> raise InputError("runs/demo/vocab/spm.model: no such file")  # the CLI: that line, exit 2
"""


class InputError(ValueError):
    """Bad user input (a config, a corpus file): the CLI prints it as one line and exits 2."""


class CorpusError(InputError):
    """A corpus that cannot be read or is empty; the message names the file (and line)."""
