"""What the outer packages share: the one error for a malformed file (errors.py) and the one-line
hint that installs a missing optional package (optional.py)."""
