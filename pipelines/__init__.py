"""The NMT pipeline stages (prepare, ...), each a function with explicit inputs and outputs."""


class InputError(ValueError):
    """Bad user input (a config, a corpus file): the CLI prints it as one line and exits 2."""


class CorpusError(InputError):
    """A corpus that cannot be read or is empty; the message names the file (and line)."""
