"""The NMT pipeline stages (prepare, ...), each a function with explicit inputs and outputs."""


class InputError(ValueError):
    """Bad user input (a config, a corpus file): the CLI prints it as one line and exits 2."""
