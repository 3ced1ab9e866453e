"""Benchmarks: chapline side by side with the reference (`python -m bench`)."""
