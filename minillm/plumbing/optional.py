"""Optional packages: importing one, or saying in one line how to install it.

minillm needs NumPy alone; torch, safetensors, Hypothesis and the peers come with the extras of
setup.cfg. The distribution is named ``minillm-numpy``: on the package index the name
``minillm`` belongs to an unrelated project, which a hint naming it would install. Inside a
checkout the extra is installed from the checkout itself.
"""
from __future__ import annotations

import importlib
import os
from pathlib import Path

DISTRIBUTION = "minillm-numpy"  # setup.cfg's name; `import minillm` either way
ROOT = Path(__file__).resolve().parents[2]  # the checkout, when this file lies in one


def install_hint(extra: str) -> str:
    """The pip command that installs an extra of minillm, for this copy of minillm.

    In a checkout (setup.cfg beside the package): `pip install -e ".[extra]"`, with the
    checkout's path when the current folder is elsewhere. An installed copy:
    `pip install "minillm-numpy[extra]"`.
    """
    if not (ROOT / "setup.cfg").is_file():
        return f'pip install "{DISTRIBUTION}[{extra}]"'
    here = "." if Path.cwd().resolve() == ROOT else os.fspath(ROOT)
    return f'pip install -e "{here}[{extra}]"'


def require(module: str, extra: str, what: str):
    """Import an optional module, or raise ImportError naming the package and the install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{what} needs the `{module.split('.')[0]}` package: "
                          f"{install_hint(extra)}") from None
