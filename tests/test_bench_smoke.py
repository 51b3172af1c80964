"""The bench command starts and prints its tables on tiny models (no timing is checked)."""
import sys

import pytest

from bench.__main__ import main
from tests.helpers import topological_order


@pytest.mark.slow  # all eight workloads: 6 s here, more on a busy machine
def test_quick_run_prints_a_table_per_workload(capsys, tmp_path):
    out_file = tmp_path / "results.md"
    assert main(["--quick", "--out", str(out_file)]) == 0
    printed = capsys.readouterr().out
    assert "numpy" in printed and "threads:" in printed
    for title in ("1. Decode", "2. Cached vs uncached", "3. Batched rollouts", "4. Prefill",
                  "5. Speculative", "6. int8", "7. Tokenizer", "### Goals"):
        assert title in printed
    assert "| student" in printed and "| minillm f32 |" in printed
    assert out_file.read_text(encoding="utf-8").count("### ") == 8


def test_a_missing_peer_is_reported_not_dropped(capsys, monkeypatch):
    # A None entry in sys.modules makes `import torch` raise ImportError, as if not installed.
    for name in ("torch", "transformers"):
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["--quick", "--only", "batch"]) == 0
    printed = capsys.readouterr().out
    assert "| PyTorch loop | missing (torch not installed" in printed
    assert "| transformers | missing (transformers not installed" in printed


def test_without_the_real_model_its_tables_say_how_to_get_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))  # an empty cache folder
    assert main(["--quick", "--only", "real"]) == 0
    printed = capsys.readouterr().out
    for title in ("R1. Real model", "R2. Real model", "R3. Real model", "R4. Real model"):
        assert title in printed
    assert printed.count("`minillm fetch smollm2-135m-instruct` writes both") == 4


def test_long_context_table_without_the_real_model_says_how_to_get_it(capsys, monkeypatch,
                                                                      tmp_path):
    from bench.suite.real_long import cases

    monkeypatch.setenv("MINILLM_CACHE", str(tmp_path))  # an empty cache folder
    assert main(["--quick", "--only", "real-long"]) == 0
    printed = capsys.readouterr().out
    assert "R5. Real model, long contexts" in printed
    assert printed.count("`minillm fetch smollm2-135m-instruct` writes both") == 1
    # Every length once, the shortest first; a decode position is read once, with its tokens.
    assert cases(quick=False) == [(256, 1), (512, 32), (1024, 1), (2048, 32), (4096, 32),
                                  (8000, 32), (8192, 1)]


def test_bench_imports_one_way():
    """Every `from .x import ...`, `from .. import x` and `from bench.x import ...` in bench/, at
    any depth in a file (lazy imports inside functions count too), is an edge; no cycle."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def module_name(path):
        parts = path.relative_to(root).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {module_name(p): p for p in (root / "bench").rglob("*.py")}
    graph = {}
    for name, path in files.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == "bench":
                    target = node.module
                else:
                    continue
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.split(".")[0] == "bench")
        # A module importing its own package (its __init__) points up, not round.
        graph[name] = {m for m in found
                       if m in files and m != name and not name.startswith(m + ".")}
    assert "bench.suite.timing" in graph["bench.suite.real_long"]  # the walk sees the imports

    assert len(topological_order(graph)) == len(graph)


def test_serving_study_prints_its_tables_on_the_shipped_model(capsys):
    """The serving study on the shipped model at tiny sizes: its three tables, the goals and
    two profiles, with every row there and the engine's tokens those of one request at a time."""
    from bench.studies.serving import main as serving

    assert serving(["--requests", "3", "--prompt", "8", "24", "--new", "2", "4",
                    "--shared", "40", "--question", "2", "6", "--shared_new", "2",
                    "--profile", "3"]) == 0
    printed = capsys.readouterr().out
    for title in ("### 1. 3 requests", "### 2. 3 requests sharing a 40-token system prompt",
                  "### 3. KV memory", "### Goals"):
        assert printed.count(title) == 1
    assert printed.count("### Profile: one engine run of workload") == 2
    assert "load average at start" in printed and "command: `python -m bench.studies" in printed
    assert printed.count("| same tokens |") == 2 and printed.count("| yes, 3 of 3 requests |") == 2
    for row in ("| new tokens per second, the whole run |", "| time to first token, p99",
                "| prompt tokens computed (engine.stats) |", "| total time, s |"):
        assert row in printed
    assert printed.count("| paged: ") == 3 and printed.count("contiguous caches of the whole") == 3
    table1 = printed.split("### 1.")[1].split("###")[0]
    assert table1.count("\n| ") == 12  # the header and 11 rows


def test_speculative_serving_study_compares_three_sides_on_the_shipped_model(capsys):
    """Guessing requests through the engine, plain ones, speculative_generate alone: a row
    each, the same tokens on every side (the study exits 1 otherwise)."""
    from bench.studies.spec_serving import main as spec_serving

    assert spec_serving(["--requests", "3", "--prompt", "8", "24", "--new", "4", "6"]) == 0
    printed = capsys.readouterr().out
    for side in ("| engine, guessing |", "| engine, no guesses |",
                 "| speculative_generate, one at a time |"):
        assert printed.count(side) == 1
    assert "same tokens on every side and round: yes" in printed


def test_pool_pages_study_times_both_pools_on_the_shipped_model(capsys):
    from bench.studies.pool_pages import main as pool_pages
    from minillm.shipped import TARGET

    assert pool_pages(["--model_path", str(TARGET), "--rounds", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("huge pages: ") == 1 and printed.count("ordinary pages: ") == 1
    assert "| huge pages |" in printed and "| ordinary pages |" in printed


@pytest.mark.slow  # seven fresh processes: 5 s here
def test_first_prefill_study_prints_its_tables_on_the_shipped_model(capsys):
    """The first-prefill study on the shipped model, minillm alone (transformers is a peer):
    fresh processes, the first read against the later ones, and the profile's pieces."""
    from bench.studies.first_prefill import PIECES, main as first_prefill

    assert first_prefill(["--model_path", "weights/target.npz", "--tokens", "16",
                          "--rounds", "1", "--calls", "2", "--contenders", "minillm",
                          "--profile", "3"]) == 0
    printed = capsys.readouterr().out
    assert "| minillm | " in printed and printed.count("x (") >= 2  # the ratio and its round
    assert "modules the first read imported: " in printed
    assert printed.count("### Profile of minillm's") == 2
    for piece in ["nothing", *PIECES]:
        assert f"| {piece} | " in printed
    assert "transformers ÷ minillm" not in printed  # asked for minillm alone


def test_serve_load_study_drives_minillm_serve_alone(capsys):
    """The load study against `minillm serve` alone (no llama.cpp) on the shipped model at a
    tiny budget: its table, every request served, the usage counts equal to the tokens
    streamed, and no request or block left in the engine after each level."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from bench.studies.serve_load import main as serve_load
    from minillm.cli.common import DEFAULT_MODEL

    assert serve_load(["--only", "minillm", "--model_path", str(DEFAULT_MODEL),
                       "--levels", "1", "3", "--requests", "2", "--max_tokens", "4",
                       "--prompt", "20", "40"]) == 0
    printed = capsys.readouterr().out
    assert "command: `python -m bench.studies.serve_load --only minillm" in printed
    rows = [line.split(" | ") for line in printed.splitlines() if line.startswith("| ")
            and " | minillm | " in line]
    assert [(r[0], r[2]) for r in rows] == [("| 1", "2"), ("| 3", "3")]  # one per client at least
    for r in rows:
        failed, length, usage_differs = r[-3:]
        assert failed == "0" and usage_differs == "0 |"
        assert int(length) <= int(r[2])
    assert "Ratios" not in printed  # one server: no ratio table
    # The warm-up and the 2 requests of level 1, then 3 more: all finished, nothing held, and
    # every prompt new (none read from the prefix cache: each level has prompts of its own).
    for level, finished in ((1, 3), (3, 6)):
        assert (f"{level} clients: 0 running, 0 waiting, 0 blocks in use, {finished} finished, "
                "0 aborted, 0 errors, 0 preemptions, 0 prompt tokens reused") in printed


def test_chat_endings_study_counts_the_replies_that_end_by_themselves(capsys, tmp_path):
    """The study on a small chat model: a row per variant and cap, every reply counted once,
    the replies that ended by a cap never fewer at a larger one."""
    import re

    import minillm
    from bench.studies.chat_endings import PROMPTS, main as chat_endings, repeats_itself
    from tests.test_chat import chatml_tokenizer

    cfg = minillm.ModelConfig(arch="modern", vocab_size=258, context_length=256, d_model=16,
                              n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=1)
    model.tokenizer = chatml_tokenizer()
    minillm.save(model, tmp_path / "chat.npz")
    assert chat_endings(["--model_path", str(tmp_path / "chat.npz"), "--seeds", "1", "--cap",
                         "6", "--caps", "3", "6", "--variant", "repetition_penalty=1.1"]) == 0
    rows = re.findall(r"^\| (.+?) \| (\d+) \| (\d+) of (\d+) \| (\d+) \| (\d+) \|",
                      capsys.readouterr().out, re.M)
    assert [(name, cap) for name, cap, *_ in rows] == [
        ("llama.cpp's chain", "3"), ("llama.cpp's chain", "6"),
        ("repetition_penalty=1.1", "3"), ("repetition_penalty=1.1", "6")]
    for _, _, ended, n, cut, _ in rows:
        assert int(ended) + int(cut) == int(n) == len(PROMPTS)
    assert int(rows[0][2]) <= int(rows[1][2]) and int(rows[2][2]) <= int(rows[3][2])
    assert repeats_itself([1, 2, 3, 4, 5, 6, 7, 8] * 3) and not repeats_itself(list(range(30)))


@pytest.mark.slow  # two fresh processes, forty automata built: 3 s here
def test_constrain_index_study_prints_its_tables_on_the_shipped_model(capsys):
    """The index study on the shipped model, minillm's two contenders alone (the peers are
    optional): a row per case and the vocabulary's, the memory table, the mask's cost with
    the same tokens constrained and not, and the profile."""
    from bench.studies.constrain_index import cases, main as constrain_index

    assert constrain_index(["--model_path", "weights/target.npz", "--rounds", "1",
                            "--contenders", "minillm full", "minillm lazy", "--tokens", "3",
                            "--profile", "3"]) == 0
    printed = capsys.readouterr().out
    for name, *_ in cases():
        assert printed.count(f"| {name} | ") == 3  # build, memory, the mask alone
    assert "| the tokenizer's vocabulary, read once | " in printed
    assert "the same tokens, yes" in printed and "% of a step" in printed
    assert "### Profile: minillm full" in printed and printed.count("| `") >= 3
