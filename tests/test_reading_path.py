"""The README's promise about its reading order, as a test: each module it lists reads top to
bottom next to its formula, knows no speed device and no clock, quotes no machine's figures,
and is short enough to hold one idea; together they are closed and they are the whole top of
the package.

The list of chapters is `minillm.READING_ORDER` (one place); the README's "Reading order"
section names the same modules in the same order. The top of `minillm/` holds those modules
(and `__init__`, `__main__`) and nothing else. For each module of the reading order:
- it imports only NumPy, the standard library and other modules of the reading order (the
  path is closed: a reader never has to leave it), and of those only the ones before it (the
  order is the dependency order: a chapter never needs one the reader has not read yet);
- it imports neither `fast` (the speed devices wrap the reference, never the reverse) nor
  `time` (the algorithms count; the command line and the bench time), and wires no fast path
  by hand (no `.fast` attribute, no `fast=` argument, no MINILLM_FAST);
- no comment or docstring quotes a machine figure: a duration (ms, µs), a size of memory
  (MB, GiB), a rate (GB/s, tokens/s, weights/s), a speed-up in figures or in words ("3.5x
  slower", "200 times faster", "twice as fast"), or speaks of the machine's devices (BLAS,
  page faults, bandwidth); those belong in docs/PERFORMANCE.md;
- it has at most 250 lines (tiny.py, the whole algorithm in one file, at most 350);
- it reads in one direction: every module-level function it calls from a top-level function
  or class is defined before it, or every one after it (a reader never jumps both ways).
"""
from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from pathlib import Path

import pytest

import minillm

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 250
MAX_LINES_ONE_FILE = 350  # tiny.py: both architectures, the filters, generation, speculative

# A speed-up in words: "two hundred times slower", "a thousand times faster", "twice as fast".
NUMBER_WORDS = ("two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|"
                "thirty|forty|fifty|sixty|seventy|eighty|ninety|hundreds?|thousands?|millions?|"
                "dozens?|and")
MACHINE_FIGURES = [
    re.compile(r"\d[\d,.]*\s*(?:ms|µs|us|ns|milliseconds?|microseconds?|nanoseconds?)\b"),
    re.compile(r"\d[\d,.]*\s*(?:[kKMGT]i?B|bytes)\b"),
    re.compile(r"(?:\d[\d,.]*\s*)?(?:[kMG]B|bytes|weights|tokens?|FLOPs?|tok)\s*(?:/\s*s|per "
               r"second)\b", re.I),
    re.compile(r"\d[\d,.]*\s*[x×]\s*(?:slower|faster|the speed)", re.I),
    re.compile(rf"\b(?:\d[\d,.]*|{NUMBER_WORDS}|an?)(?:[\s-]+(?:{NUMBER_WORDS}))*\s+times\s+"
               r"(?:slower|faster|quicker|as (?:fast|slow|quick)|the speed)\b", re.I),
    re.compile(r"\b(?:twice|thrice|half|an? (?:third|quarter)|one (?:third|quarter))\s+"
               r"(?:as (?:fast|slow|quick)|the speed|slower|faster)\b", re.I),
    re.compile(r"\borders? of magnitude (?:slower|faster|quicker)\b", re.I),
    re.compile(r"\bBLAS\b|page faults?|bandwidth|cache lines?|\bSIMD\b|\bAVX", re.I),
]
FORBIDDEN_IMPORTS = {"fast", "time"}
FOLDERS = ("constrain", "serving")  # the chapters in a folder of their own


def reading_order(root: Path = ROOT) -> list[Path]:
    """The modules of the reading path, in order: minillm.READING_ORDER (dotted names within
    the package, the constrained decoding and serving chapters' in their folders)."""
    return [root / "minillm" / (name.replace(".", "/") + ".py")
            for name in minillm.READING_ORDER]


def readme_order(root: Path = ROOT) -> list[str]:
    """The modules the README's reading order names, in its order: the backticked `x.py` of
    the section's paragraphs before its first table or code block."""
    readme = (root / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Reading order", 1)[1].split("\n## ", 1)[0]
    prose_part = re.split(r"\n(?:\||```)", section, maxsplit=1)[0]
    names = re.findall(r"`(?:minillm/)?((?:(?:%s)/)?\w+)\.py`" % "|".join(FOLDERS),
                       prose_part)
    return list(dict.fromkeys(name.replace("/", ".") for name in names))


def outside_imports(tree: ast.Module, chapters, package: str = "") -> list[str]:
    """Every import that is not NumPy, the standard library or another chapter; `package`:
    the dotted folder of the module within minillm ("" at the top, "serving" in its folder)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            tops = [alias.name.split(".")[0] for alias in node.names]
            found += [name for name in tops if name != "numpy"
                      and name not in sys.stdlib_module_names]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                top = (node.module or "").split(".")[0]
                if top != "numpy" and top not in sys.stdlib_module_names:
                    found.append(node.module)
            else:
                here = package.split(".") if package else []
                if node.level - 1 > len(here):
                    found.append("." * node.level + (node.module or ""))
                    continue
                base = here[:len(here) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
                if target not in chapters:
                    found.append("." * node.level + (node.module or ""))
    return found


def chapters_imported(tree: ast.Module, chapters, package: str = "") -> set[str]:
    """The chapters a module imports (`from .x import`, `from ..x import`, `from . import x`,
    at any depth), as names of the reading order; `package` as in outside_imports."""
    here = package.split(".") if package else []
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and node.level - 1 <= len(here):
            target = here[:len(here) - node.level + 1] + ([node.module] if node.module else [])
            found.add(".".join(target))
            # from .serving import engine: a name imported from a package may be a module of it
            found.update(".".join(target + [alias.name]) for alias in node.names)
    return found & set(chapters)


def read_too_early(name: str, tree: ast.Module, chapters=minillm.READING_ORDER) -> list[str]:
    """The chapters module `name` imports that do not come before it in `chapters`."""
    package = name.rpartition(".")[0]
    before = set(chapters[:chapters.index(name)])
    return sorted(chapters_imported(tree, chapters, package) - before)


def imported(tree: ast.Module) -> set[str]:
    """Every module name an import names, at any depth, the last part of a dotted name too."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            parts = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = [node.module or ""] + [alias.name for alias in node.names]
        else:
            continue
        for part in parts:
            names.update(part.split("."))
    return names


def fast_wiring(tree: ast.Module) -> list[str]:
    """Where the code reaches into the fast path: a `.fast` attribute, a `fast=` argument, the
    MINILLM_FAST switch."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "fast":
            found.append(f"line {node.lineno}: .fast")
        elif isinstance(node, ast.keyword) and node.arg == "fast":
            found.append(f"line {node.value.lineno}: fast=")
        elif isinstance(node, ast.Constant) and node.value == "MINILLM_FAST":
            found.append(f"line {node.lineno}: MINILLM_FAST")
    return found


def prose(source: str, tree: ast.Module) -> list[tuple[int, str]]:
    """(line, text) of every comment and docstring."""
    found = [(t.start[0], t.string) for t in tokenize.generate_tokens(io.StringIO(source).readline)
             if t.type == tokenize.COMMENT]
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc is not None:
                found.append((node.body[0].lineno, doc))
    return found


def machine_figures(source: str, tree: ast.Module) -> list[str]:
    return [f"line {line}: {match.group(0)!r}" for line, text in prose(source, tree)
            for pattern in MACHINE_FIGURES for match in pattern.finditer(text)]


def two_way_readers(tree: ast.Module) -> list[str]:
    """Top-level functions and classes that call module-level functions defined both before
    and after them."""
    defined = {node.name: node.lineno for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defined
                and n.id != node.name}
        before = sorted(u for u in used if defined[u] < node.lineno)
        after = sorted(u for u in used if defined[u] > node.lineno)
        if before and after:
            found.append(f"{node.name} (line {node.lineno}) uses {before} above and {after} "
                         "below")
    return found


def offences(source: str, max_lines: int = MAX_LINES, chapters=minillm.READING_ORDER,
             package: str = "") -> list[str]:
    """Everything in one module's source that breaks the promise, each as one line."""
    tree = ast.parse(source)
    found = [f"imports {name} (outside the reading path)"
             for name in outside_imports(tree, chapters, package)]
    found += [f"imports {name}" for name in sorted(imported(tree) & FORBIDDEN_IMPORTS)]
    found += [f"wires the fast path, {where}" for where in sorted(fast_wiring(tree))]
    found += [f"quotes a machine figure, {figure}" for figure in machine_figures(source, tree)]
    lines = len(source.splitlines())
    if lines > max_lines:
        found.append(f"has {lines} lines (at most {max_lines})")
    found += [f"reads both ways: {reader}" for reader in two_way_readers(tree)]
    return found


def test_the_reading_order_names_the_algorithm_modules():
    names = list(minillm.READING_ORDER)
    assert names[0] == "tiny"
    assert {"sampling", "layers", "kv_cache", "model", "generate", "speculative",
            "quantize", "config", "knobs"} <= set(names), names
    assert "fast" not in names
    assert all(path.is_file() for path in reading_order())


def test_the_readme_shows_the_reading_order():
    assert readme_order() == list(minillm.READING_ORDER)


@pytest.mark.parametrize("name", minillm.READING_ORDER)
def test_each_chapter_imports_only_the_chapters_before_it(name):
    """The reading order is the dependency order: tiny imports no chapter, and every other
    chapter only chapters the reader has already read."""
    path = ROOT / "minillm" / (name.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    assert read_too_early(name, tree) == [], f"{name} imports chapters that come after it"
    if name == "tiny":
        assert chapters_imported(tree, minillm.READING_ORDER) == set()


def test_the_top_of_the_package_is_the_reading_path():
    top = {path.stem for path in (ROOT / "minillm").glob("*.py")} - {"__init__", "__main__"}
    for folder in FOLDERS:
        top |= {f"{folder}.{path.stem}" for path in (ROOT / "minillm" / folder).glob("*.py")
                if path.stem != "__init__"}
    assert top == set(minillm.READING_ORDER), sorted(top ^ set(minillm.READING_ORDER))


@pytest.mark.parametrize("path", reading_order(), ids=lambda path: path.name)
def test_each_module_of_the_reading_order_keeps_the_promise(path):
    limit = MAX_LINES_ONE_FILE if path.stem == "tiny" else MAX_LINES
    package = ".".join(path.relative_to(ROOT / "minillm").parts[:-1])
    found = offences(path.read_text(encoding="utf-8"), limit, package=package)
    assert not found, f"{path.name}:\n  " + "\n  ".join(found)


def test_the_checks_catch_what_they_look_for():
    """Each check fails on a module that breaks it (so that a pass means something)."""
    bad = '''"""Decoding runs at 321 tokens/s; the cache takes 377 MB, 3.5x slower when BLAS..."""
import time
from . import fast


def late():
    return early() + later()  # 12 ms a step


def early():
    return 1


def later():
    return 2
'''
    tree = ast.parse(bad)
    assert imported(tree) & FORBIDDEN_IMPORTS == {"fast", "time"}
    leaving = ast.parse("import os, torch\nfrom .text.tokenizer import same_tokens\n"
                        "from ..files import npz\nfrom . import model\nfrom .window import x\n"
                        "from numpy.linalg import norm\n")
    assert outside_imports(leaving, ("window",)) == ["torch", ".text.tokenizer", "..files", "."]
    inside = ast.parse("from ..generate import decode\nfrom .blocks import x\nfrom ..fast import y\n")
    assert outside_imports(inside, ("generate", "serving.blocks"), "serving") == ["..fast"]
    wired = ast.parse('draft = replace(model, fast=False)\ndraft.fast = model.fast\n'
                      'on = os.environ.get("MINILLM_FAST")\n')
    assert sorted(fast_wiring(wired)) == ["line 1: fast=", "line 2: .fast", "line 2: .fast",
                                          "line 3: MINILLM_FAST"]
    figures = " ".join(machine_figures(bad, tree))
    for quoted in ("321 tokens/s", "377 MB", "3.5x slower", "BLAS", "12 ms"):
        assert quoted in figures, quoted
    in_words = ('"""A copy element by element, about 200 times slower; the tiled loop is twice '
                'as fast,\nthree times faster, two hundred times the speed, an order of '
                'magnitude quicker."""\n')
    figures = " ".join(machine_figures(in_words, ast.parse(in_words)))
    for quoted in ("200 times slower", "twice as fast", "three times faster",
                   "two hundred times the speed", "order of magnitude quicker"):
        assert quoted in figures, quoted
    plain = ('"""Arrays twice as long; each token three times;\nhalf the window, two tokens at '
             'a time, ten times the keys."""\n')
    assert machine_figures(plain, ast.parse(plain)) == []
    ordered = ("tiny", "inputs", "window", "serving.blocks", "serving.engine")
    late = ast.parse("from .window import first_window\nfrom .serving import engine\n"
                     "from . import tiny\nimport numpy\n")
    assert read_too_early("inputs", late, ordered) == ["serving.engine", "window"]
    assert read_too_early("serving.engine", ast.parse("from ..window import x\n"
                                                      "from .blocks import y\n"), ordered) == []
    assert read_too_early("serving.blocks", ast.parse("from .engine import Engine\n"),
                          ordered) == ["serving.engine"]
    assert two_way_readers(tree) == []  # late calls both helpers after it: one direction
    both_ways = ast.parse("def a():\n    return 1\n\n\ndef b():\n    return a() + c()\n\n\n"
                          "def c():\n    return 2\n")
    assert two_way_readers(both_ways) == ["b (line 5) uses ['a'] above and ['c'] below"]
    assert offences("\n" * (MAX_LINES - 1) + "x = 1\n") == []
    assert offences("\n" * MAX_LINES + "x = 1\n") == [f"has {MAX_LINES + 1} lines (at most "
                                                      f"{MAX_LINES})"]
