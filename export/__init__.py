"""Serving exports: the in-graph beam-search Translator, a versioned SavedModel for TF Serving
and ONNX models for ONNX Runtime."""
