"""Reading a tokenizer from a Hugging Face ``tokenizer.json`` or a GGUF file's metadata, and
writing a ``tokenizer.json``.

tokenizer.json: a BPE model, byte-level (``ByteLevel`` pre-tokenizer and decoder, its regexes
from ``Split``/``Digits`` steps run as the Rust library runs them) or SentencePiece-style
(``byte_fallback``, ``Metaspace`` or the ``Prepend``/``Replace`` normalizers of Llama 2). The
post-processor's template tells whether BOS/EOS surround a plain prompt.

GGUF: ``tokenizer.ggml.model`` "gpt2" (byte-level BPE, the pre-tokenizer named by
``tokenizer.ggml.pre``, llama.cpp's "default" rules without one) or "llama" (SentencePiece,
merged by ``tokenizer.ggml.scores``). Missing keys take llama.cpp's defaults: BOS 1, EOS 2,
``<unk>`` 0 and ``add_bos_token`` true for SentencePiece; BOS = EOS = 11 for BPE, BOS added
only for the rules that say so (Llama 3's); ``add_eos_token`` false; ``add_space_prefix`` true.
Control, user-defined and unknown tokens are matched whole in the text, like the added tokens
of tokenizer.json, after llama.cpp's load-time rules: tokens retyped by their text, Phi-3's
tokens taking the whitespace after them (``minillm.text.gguf_specials``). The same rules give
llama.cpp's end-of-generation set, kept in the config (``end_of_generation_ids``): a generation
stops where llama.cpp's does. Every GGUF key is read in ``_gguf_fields``, through the typed
reader.
"""
from dataclasses import replace
import json

from .bpe import byte_spelled
from .gguf_specials import BYTE, NORMAL, gguf_special_tokens
from ..plumbing.errors import WeightsError
from .pretokenize import DIGIT_REGEX, DIGITS_REGEX, GPT2, GPT2_REGEX, Rules, rules_named
from .sentencepiece import SPACE, SentencePiece, merges_from_scores
from .tokenizer_config import TokenizerConfig

# llama.cpp's special token ids when the file names none (a default past the vocabulary: none).
DEFAULT_IDS = {"gpt2": {"bos": 11, "eos": 11, "unknown": None},
               "llama": {"bos": 1, "eos": 2, "unknown": 0}}


# ---------------------------------------------------------------------- tokenizer.json

def from_tokenizer_json(cls, text, config=None):
    """A ``cls`` (Tokenizer) from the text of a tokenizer.json and an optional config.

    Raises ``ValueError`` for a file that is not BPE or uses a feature this implementation
    leaves out (other normalizers, word prefixes and suffixes, dropout). Added tokens keep
    their ``lstrip``, ``rstrip``, ``single_word`` and ``normalized`` (``added_tokens``).
    """
    data = json.loads(text)
    model = data.get("model") or {}
    if model.get("type", "BPE") != "BPE":
        raise ValueError(f"tokenizer model {model.get('type')!r} is not BPE")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key):
            raise ValueError(f"BPE option {key}={model[key]!r} is not supported")
    added = data.get("added_tokens") or []
    config = _config_from_post_processor(data.get("post_processor"), config or TokenizerConfig())
    if config.unk_token is None and model.get("unk_token") is not None:
        config = replace(config, unk_token=model["unk_token"])
    kwargs = dict(config=config, source_json=text, ignore_merges=model.get("ignore_merges", False))
    sentencepiece = _sentencepiece_from_json(data, model)
    if sentencepiece is not None:
        kwargs["sentencepiece"] = sentencepiece
    else:
        if _normalizers(data.get("normalizer")):
            raise ValueError("tokenizer normalizers are not supported for byte-level BPE")
        decoder = data.get("decoder")
        if decoder is not None and decoder.get("type") != "ByteLevel":
            raise ValueError(f"decoder {decoder.get('type')!r} is not supported")
        rules, kwargs["add_prefix_space"] = _rules_from_json(data.get("pre_tokenizer"),
                                                             kwargs["ignore_merges"])
        kwargs["pre_tokenizer"] = (rules if config.pre_tokenizer is None
                                   else _named_rules(rules, config.pre_tokenizer))
    return cls(model["vocab"], model.get("merges") or [], added, **kwargs)


def _normalizers(normalizer):
    """The list of normalizers (a Sequence flattened; none: [])."""
    if normalizer is None:
        return []
    if normalizer.get("type") == "Sequence":
        return [n for step in normalizer.get("normalizers") or [] for n in _normalizers(step)]
    return [normalizer]


def _rules_from_json(pre, ignore_merges):
    """(Rules or a llama.cpp name, add_prefix_space) of a byte-level tokenizer.json.

    The steps are ``Split`` (behavior "Isolated", a regex or a plain string), ``Digits``, and a
    final ``ByteLevel`` (its regex GPT-2's when ``use_regex``). A list of regexes equal to one
    of llama.cpp's named rules is read as that name (what ``to_tokenizer_json`` writes).
    """
    pre = pre or {}
    steps = pre.get("pretokenizers") or [] if pre.get("type") == "Sequence" else [pre]
    if not steps or steps[-1].get("type") != "ByteLevel":
        raise ValueError(f"pre-tokenizer {json.dumps(pre)[:300]} is not supported; expected "
                         "Split and Digits steps ending with ByteLevel")
    regexes = []
    for step in steps[:-1]:
        kind = step.get("type")
        if kind == "Digits":
            regexes.append(DIGIT_REGEX if step.get("individual_digits") else DIGITS_REGEX)
        elif (kind == "Split" and step.get("behavior") == "Isolated"
              and not step.get("invert", False)):
            pattern = step.get("pattern") or {}
            if "Regex" in pattern:
                regexes.append(pattern["Regex"])
            else:
                regexes.append("".join("\\" + c if not c.isalnum() else c
                                       for c in pattern["String"]))
        else:
            raise ValueError(f"pre-tokenizer step {json.dumps(step)[:200]} is not supported; "
                             "expected Split (behavior Isolated), Digits or ByteLevel")
    byte_level = steps[-1]
    if byte_level.get("use_regex", True):
        regexes.append(GPT2_REGEX)
    if byte_level.get("add_prefix_space", False) and len(steps) > 1:
        raise ValueError("pre-tokenizer: ByteLevel add_prefix_space after other steps is not "
                         "supported")
    return (Rules(tuple(regexes), ignore_merges, engine="tokenizers"),
            byte_level.get("add_prefix_space", False))


def _named_rules(rules, name):
    """The llama.cpp rules ``name`` (a tokenizer read from GGUF and written to tokenizer.json
    keeps the name in its config), checked to be the ones the file spells out."""
    named = rules_named(name)
    spelled = tuple(GPT2 if r == GPT2_REGEX else r for r in rules.regexes)
    if spelled != named.regexes:
        raise ValueError(f"tokenizer config: pre_tokenizer {name!r} does not match the "
                         "tokenizer.json's pre-tokenizer")
    return name


def _sentencepiece_from_json(data, model):
    """The ``SentencePiece`` of a SentencePiece-style tokenizer.json, or None for byte-level.

    Two forms: Llama 2's normalizers (``Prepend("▁")`` and ``Replace(" ", "▁")``, no
    pre-tokenizer) and the ``Metaspace`` pre-tokenizer.
    """
    normalizers = _normalizers(data.get("normalizer"))
    pre = data.get("pre_tokenizer") or {}
    kinds = [n.get("type") for n in normalizers]
    if not (model.get("byte_fallback") or pre.get("type") == "Metaspace" or "Replace" in kinds):
        return None
    replace_spaces = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    decoder_steps = (data.get("decoder") or {}).get("decoders") or [data.get("decoder") or {}]
    strip = any(d.get("type") == "Strip" and d.get("content") == " " and d.get("start") == 1
                for d in decoder_steps)
    if pre.get("type") == "Metaspace" and not normalizers:
        scheme = pre.get("prepend_scheme", "always" if pre.get("add_prefix_space", True)
                         else "never")
        if pre.get("replacement", SPACE) != SPACE:
            raise ValueError(f"Metaspace replacement {pre.get('replacement')!r} is not supported")
        return SentencePiece(space_prefix={"always": "every", "first": "first",
                                           "never": "none"}[scheme],
                             prefix_before_space=False, split_words=pre.get("split", True),
                             byte_fallback=bool(model.get("byte_fallback")),
                             strip_space=strip or (
                                 any(d.get("type") == "Metaspace" for d in decoder_steps)
                                 and scheme != "never"))
    if data.get("pre_tokenizer") is None and kinds in (["Prepend", "Replace"], ["Replace"]):
        prepend = normalizers[0] if kinds[0] == "Prepend" else None
        if ({k: v for k, v in normalizers[-1].items() if k in replace_spaces} != replace_spaces
                or (prepend is not None and prepend.get("prepend") != SPACE)):
            raise ValueError(f"SentencePiece normalizers {json.dumps(normalizers)[:200]} are "
                             "not supported")
        return SentencePiece(space_prefix="every" if prepend else "none",
                             byte_fallback=bool(model.get("byte_fallback")), strip_space=strip)
    raise ValueError(f"SentencePiece form not supported: normalizer "
                     f"{json.dumps(data.get('normalizer'))[:200]}, pre-tokenizer "
                     f"{json.dumps(data.get('pre_tokenizer'))[:200]}")


def _config_from_post_processor(post, config):
    """The config, with ``add_bos_token``/``add_eos_token`` (and the BOS/EOS tokens, where the
    config names none) taken from a ``TemplateProcessing`` post-processor when it has none."""
    steps = (post or {}).get("processors") or [post or {}]
    template = next((s for s in steps if s.get("type") == "TemplateProcessing"), None)
    if template is None:
        return config
    items = template.get("single") or []
    position = next((i for i, item in enumerate(items) if "Sequence" in item), 0)
    before = [item["SpecialToken"]["id"] for item in items[:position] if "SpecialToken" in item]
    after = [item["SpecialToken"]["id"] for item in items[position + 1:]
             if "SpecialToken" in item]
    changes = {}
    if config.add_bos_token is None:
        changes["add_bos_token"] = bool(before)
    if config.add_eos_token is None:
        changes["add_eos_token"] = bool(after)
    if before and config.bos_token is None:
        changes["bos_token"] = before[0]
    if after and config.eos_token is None:
        changes["eos_token"] = after[-1]
    return replace(config, **changes)


# ---------------------------------------------------------------------- GGUF

def _gguf_fields(metadata):
    """Every tokenizer key of a GGUF file's metadata, checked by the typed reader
    (``gguf_metadata.tokenizer_metadata``: a wrong type or range is a WeightsError naming the
    key): {short name: value} for the keys the file has."""
    from ..files.gguf_metadata import tokenizer_metadata

    return {key.rsplit(".", 1)[-1]: value for key, value in tokenizer_metadata(metadata).items()
            if value is not None}


def from_gguf_metadata(cls, metadata):
    """A ``cls`` (Tokenizer) from a GGUF file's metadata ({key: value}, as in the file).

    What the file holds wrongly or what minillm cannot run is a WeightsError (a ValueError).
    """
    fields = _gguf_fields(metadata)
    try:
        return _from_gguf_fields(cls, fields)
    except WeightsError:
        raise
    except ValueError as e:  # what the tokenizer refuses: in the file's terms too
        raise WeightsError(f"tokenizer: {e}") from None


def _from_gguf_fields(cls, fields):
    """The tokenizer of checked GGUF fields (``_gguf_fields``)."""
    kind = fields.get("model")
    if kind not in DEFAULT_IDS:
        raise ValueError(f"tokenizer.ggml.model {kind!r} is not supported; minillm reads "
                         "byte-level BPE ('gpt2') and SentencePiece ('llama')")
    tokens = fields["tokens"]
    types = fields.get("token_type", [NORMAL] * len(tokens))

    def token_named(key):
        """The text of the token at ``tokenizer.ggml.<key>_token_id`` (llama.cpp's default when
        absent), or None."""
        token_id = fields.get(f"{key}_token_id", DEFAULT_IDS[kind].get(key))
        return None if token_id is None or token_id >= len(tokens) else tokens[token_id]

    eos_id = fields.get("eos_token_id", DEFAULT_IDS[kind]["eos"])
    added, ends = gguf_special_tokens(tokens, types, fields,
                                      eos_id if eos_id < len(tokens) else None)
    whole = {token.id for token in added}
    vocab = {byte_spelled(token) if kind == "gpt2" else token: token_id
             for token_id, token in enumerate(tokens) if token_id not in whole}
    if kind == "gpt2":
        if "merges" not in fields:
            raise ValueError("tokenizer.ggml.merges: missing, expected array of string")
        pre = fields.get("pre", "default")
        rules = rules_named(pre)
        add_bos = fields.get("add_bos_token", rules.add_bos)
        build = dict(pre_tokenizer=pre)
        merges = fields["merges"]
    else:
        scores = fields.get("scores", [0.0] * len(tokens))
        prefix = fields.get("add_space_prefix", True)
        build = dict(sentencepiece=SentencePiece(
            scores=tuple(scores), space_prefix="every" if prefix else "none",
            strip_space=prefix), byte_tokens=[i for i, t in enumerate(types) if t == BYTE])
        add_bos = fields.get("add_bos_token", True)
        merges, pre = [], None
    config = TokenizerConfig(
        bos_token=token_named("bos"), eos_token=token_named("eos"),
        pad_token=token_named("padding"), unk_token=token_named("unknown"),
        add_bos_token=add_bos, add_eos_token=fields.get("add_eos_token", False),
        chat_template=fields.get("chat_template"), pre_tokenizer=pre,
        strip_whitespace="ascii" if any(t.lstrip or t.rstrip for t in added) else None,
        end_of_generation_ids=ends)
    return cls(vocab, merges, added, config=config, **build)


# ---------------------------------------------------------------------- writing tokenizer.json

def to_tokenizer_json(tok):
    """The tokenizer.json text of a tokenizer (read back by ``from_tokenizer_json`` to the same
    tokenizer; a SentencePiece vocabulary merged by score gets merges ordered by score)."""
    added = [{"id": t.id, "content": t.content, "single_word": t.single_word,
              "lstrip": t.lstrip, "rstrip": t.rstrip, "normalized": t.normalized,
              "special": t.special} for t in sorted(tok.added.values(), key=lambda t: t.id)]
    model = {"type": "BPE", "dropout": None, "unk_token": None,
             "continuing_subword_prefix": None, "end_of_word_suffix": None,
             "fuse_unk": False, "byte_fallback": False, "ignore_merges": tok.ignore_merges,
             "vocab": tok.vocab}
    if tok.sentencepiece is None:
        pre_tokenizer = _pre_tokenizer_json(tok.rules, tok.add_prefix_space)
        decoder = {"type": "ByteLevel", "add_prefix_space": tok.add_prefix_space,
                   "trim_offsets": True, "use_regex": True}
        normalizer = None
        merges = tok.ranks.merge_list()
    else:
        sp = tok.sentencepiece
        normalizer, pre_tokenizer = _sentencepiece_json(sp)
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]
            + ([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if sp.strip_space
               else [])}
        if sp.scores is not None:
            normal = set(tok.vocab.values()) - set(tok.added_tokens.values()) - tok.byte_tokens
            merges = merges_from_scores(tok.vocab, sp.scores, normal)
        else:
            merges = tok.ranks.merge_list()
        model.update(byte_fallback=sp.byte_fallback, fuse_unk=True,
                     unk_token=tok.token_of(tok.unk_token_id))
    model["merges"] = merges
    # Added tokens are in the model's vocabulary too (tok.vocab holds them): the Rust
    # library keeps their ids only then.
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": None,
        "decoder": decoder, "model": model}, ensure_ascii=False)


def _pre_tokenizer_json(rules, add_prefix_space):
    """The tokenizer.json form of byte-level rules (read back by ``_rules_from_json``)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space,
                  "trim_offsets": True, "use_regex": True}
    regexes = tuple(GPT2 if r == GPT2_REGEX else r for r in rules.regexes)
    if regexes == (GPT2,):
        return byte_level
    if regexes == (DIGIT_REGEX, GPT2):
        return {"type": "Sequence",
                "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated",
               "invert": False} for r in rules.regexes]
    return {"type": "Sequence", "pretokenizers": splits + [dict(byte_level, use_regex=False)]}


def _sentencepiece_json(sp):
    """(normalizer, pre_tokenizer) of a tokenizer.json for SentencePiece merging."""
    if sp.prefix_before_space and not sp.split_words and sp.space_prefix != "first":
        replace = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
        prepend = [{"type": "Prepend", "prepend": SPACE}] if sp.space_prefix == "every" else []
        return {"type": "Sequence", "normalizers": prepend + [replace]}, None
    scheme = {"every": "always", "first": "first", "none": "never"}[sp.space_prefix]
    return None, {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": scheme,
                  "split": sp.split_words}

