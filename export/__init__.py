"""Serving exports: the in-graph beam-search Translator, a versioned SavedModel for TF Serving
and ONNX models for ONNX Runtime."""


class ExportError(ValueError):
    """An export that is missing or cannot serve the request (the CLI prints it as one line and
    exits 2)."""
