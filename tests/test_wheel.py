"""An installed copy runs the README's first command: the wheel built from this checkout, in a
fresh virtual environment, generates from the shipped model (which travels as package data,
minillm/shipped/) with nothing of the checkout on its path."""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def run(*command, cwd=None, env=None):
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{command}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def test_the_wheel_holds_the_shipped_model_and_its_command_runs(tmp_path):
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "dist"),
        str(ROOT))
    wheel, = (tmp_path / "dist").glob("minillm_numpy-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        shipped = archive.getinfo("minillm/shipped/target.npz")
    assert {"minillm/shipped/draft.npz", "minillm/shipped/web_valid.txt"} <= set(names)
    assert shipped.file_size == (ROOT / "weights" / "target.npz").stat().st_size  # not a link

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv))
    python = venv / "bin" / "python"
    run(str(python), "-m", "pip", "install", "--quiet", str(wheel))  # and NumPy, its one need
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MINILLM_CACHE")}
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    where = run(str(python), "-c", "import minillm; print(minillm.__file__)", cwd=outside,
                env=env).stdout
    assert str(venv) in where and str(ROOT) not in where
    done = run(str(venv / "bin" / "minillm"), "generate", "In the beginning",
               "--max_new_tokens", "8", cwd=outside, env=env)
    assert done.stdout.startswith("In the beginning") and len(done.stdout) > len("In the beginning")
