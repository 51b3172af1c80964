"""Install hints: the distribution's own name (not `minillm`, an unrelated project on the
package index), and the command that fits this copy: a checkout or an installed package."""
import ast
import configparser
import re
from pathlib import Path

import pytest

from minillm.plumbing import optional

ROOT = Path(__file__).resolve().parents[1]


def setup_cfg():
    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg", encoding="utf-8")
    return parser


def test_in_a_checkout_the_hint_installs_the_checkout(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    assert optional.install_hint("convert") == 'pip install -e ".[convert]"'
    monkeypatch.chdir(tmp_path)  # elsewhere: the checkout's own path
    assert optional.install_hint("convert") == f'pip install -e "{ROOT}[convert]"'


def test_an_installed_copy_gets_the_distribution_name(monkeypatch, tmp_path):
    monkeypatch.setattr(optional, "ROOT", tmp_path / "site-packages")  # no setup.cfg there
    assert optional.install_hint("convert") == 'pip install "minillm-numpy[convert]"'


def test_the_hints_name_the_distribution_and_extras_of_setup_cfg():
    cfg = setup_cfg()
    assert cfg["metadata"]["name"] == optional.DISTRIBUTION
    extras = set(cfg["options.extras_require"])
    used = set()
    callers = [p for folder in ("minillm", "bench", "tests") for p in (ROOT / folder).rglob("*.py")
               if p.name not in ("optional.py", "test_optional.py")]
    for path in callers:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = getattr(getattr(node, "func", None), "id", None)
            if isinstance(node, ast.Call) and name in ("require", "install_hint"):
                extra = node.args[1 if name == "require" else 0]
                used.add(extra.value if isinstance(extra, ast.Constant) else None)
    assert {"convert", "testing", "peers", "bench"} <= used <= extras


def test_a_missing_package_is_one_line_naming_the_install():
    with pytest.raises(ImportError) as error:
        optional.require("no_such_package_here.sub", "convert", "reading a checkpoint")
    assert str(error.value) == ("reading a checkpoint needs the `no_such_package_here` "
                                f"package: {optional.install_hint('convert')}")


def test_no_doc_or_message_installs_the_other_projects_minillm():
    # `pip install minillm[...]`, `"minillm[...]"`: what the package index resolves to the
    # unrelated project
    wrong = re.compile(r"""pip install\s+["']?minillm(\[|["'\s]|$)""", re.M)
    files = [p for p in ROOT.rglob("*") if p.suffix in (".py", ".md", ".cfg", ".sh")
             and not p.relative_to(ROOT).parts[0].startswith((".", "venv"))
             and p.name != "test_optional.py"]  # this file spells the wrong forms out
    files += [ROOT / ".ci" / "run", ROOT / ".ci" / "peers.sh"]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in files
             for m in wrong.finditer(p.read_text(encoding="utf-8", errors="replace"))]
    assert found == []
