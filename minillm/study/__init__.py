"""Studying a model: held-out loss and bits per byte (evaluate.py), what quantization changes
(quality.py), and every generated token's surprise, rank and repeats (explain.py)."""
