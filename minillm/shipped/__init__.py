"""The shipped model, its draft and its held-out text, inside the package so that an installed
copy (a wheel, `pip install .`) runs `minillm generate` as a checkout does. In the repository
these are links to weights/, where the files and their provenance live (weights/README.md)."""
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = HERE / "target.npz"  # the default model of every command
DRAFT = HERE / "draft.npz"  # the desk's default draft for speculative decoding
HELD_OUT = HERE / "web_valid.txt"  # minillm eval's default text
