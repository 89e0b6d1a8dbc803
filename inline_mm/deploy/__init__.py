"""Whole detectors and segmentors as single ONNX files (docs/deploy.md)."""
