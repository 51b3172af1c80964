"""Which tokens of a GGUF vocabulary are cut out of a text whole, and the whitespace they take:
the token types of ``tokenizer.ggml.token_type`` as llama.cpp changes them when it loads the
file (``llama_vocab::impl::load``), followed wherever they change the ids of a text.

Control, user-defined and unknown tokens are matched whole (control and unknown ones are
special: decoding may skip them). llama.cpp then retypes tokens by their text:

1. **End of generation.** A token whose text is one of ``END_OF_GENERATION`` (``<|im_end|>``,
   ``<|endoftext|>``, ``</s>``, ...) becomes a control token, whatever its type: a ``</s>`` that
   is an ordinary word of a Qwen2-family vocabulary is then one id, not ``</``, ``s``, ``>``.
2. **Fill in the middle.** For each FIM role the file gives no id
   (``tokenizer.ggml.fim_pre_token_id``, ...), the token with one of that role's texts
   (``<|fim_prefix|>``, ``<PRE>``, ...) becomes a control token. Of two such tokens, llama.cpp
   retypes the one its hash map yields first; minillm the one listed first here (real
   vocabularies hold one).
3. **gpt-oss.** ``<|channel|>``, ``<|message|>``, ``<|start|>`` and ``<|constrain|>`` become
   user-defined; with ``<|return|>`` and ``<|call|>`` (or solar-open's ``<|calls|>`` and
   ``<|flush|>``) among the end-of-generation tokens, ``<|end|>`` does too.
4. **Gemma 4, PLaMo.** With ``<|tool_response>`` or ``<|plamo:eos|>`` among the
   end-of-generation tokens (the EOS, EOT, EOM and FIM pad/repo/separator ids count too), a
   ``</s>`` there becomes an ordinary token again.
5. **Whitespace, by name** (llama.cpp strips C's ``isspace``: space, \\t, \\n, \\v, \\f, \\r):

   * ``general.name`` containing "phi-3" or "phi3" (ASCII letters lowercased): every token
     matched whole takes the whitespace after it (``rstrip``), and so does ``</s>``, except
     ``<unk>``, ``<s>`` and ``<|endoftext|>``. (llama.cpp fails to load such a file when one of
     these four is missing; minillm applies the rule to those present.)
   * ``tokenizer.ggml.pre`` containing "jina-v2-de", "jina-v2-es" or "jina-v2-code", or
     ``general.architecture`` "nomic-bert-moe" or "jina-bert-v3": ``<mask>`` takes the
     whitespace before it (``lstrip``); a name containing "modern-bert": ``[MASK]`` does.

The same pass gives the **end-of-generation set**, the ids llama.cpp stops at
(``llama_vocab_is_eog``): the FIM pad, repo and separator ids (rule 2's roles), every token with
an ``END_OF_GENERATION`` text, the EOS id and the EOT and EOM ids the file names; less harmony's
``<|end|>`` and Gemma 4's ``</s>`` where rules 3 and 4 make them ordinary (of two ids with
that text, the larger, as llama.cpp's ordered set yields it last), even when it is the EOS.
Not followed: where a vocabulary holds two texts of one FIM role and the file names no id,
llama.cpp's set holds the one its hash map yields first (an order C++ leaves unspecified);
minillm's the one listed first, as rule 2.

llama.cpp also marks control tokens named "unused" unused, and looks up the EOT and EOM ids by
text (texts of ``END_OF_GENERATION``: no id that the set lacks); neither changes an id. Where
llama.cpp takes a key's id past the vocabulary as the default id, minillm refuses the file
(``gguf_metadata.tokenizer_metadata``).
"""
from .added_tokens import AddedToken

# The GGUF token types (`tokenizer.ggml.token_type`, llama.cpp's llama_token_type).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
MATCHED_WHOLE = (CONTROL, USER_DEFINED, UNKNOWN)

END_OF_GENERATION = (
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[")
# Each FIM role: its GGUF keys (the current one, then the deprecated one) and its texts.
FILL_IN_THE_MIDDLE = {
    "pre": (("fim_pre_token_id", "prefix_token_id"),
            ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uff5cfim\u2581begin\uff5c>",
             "<PRE>", "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>")),
    "suf": (("fim_suf_token_id", "suffix_token_id"),
            ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uff5cfim\u2581hole\uff5c>",
             "<SUF>", "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>")),
    "mid": (("fim_mid_token_id", "middle_token_id"),
            ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uff5cfim\u2581end\uff5c>",
             "<MID>", "\u2581<MID>", "<|code_middle|>", "<|middle|>")),
    "pad": (("fim_pad_token_id",), ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]")),
    "rep": (("fim_rep_token_id",),
            ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>")),
    "sep": (("fim_sep_token_id",), ("<|file_sep|>",)),
}
GPT_OSS_USER_DEFINED = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
PHI3_NOT_STRIPPED = ("<unk>", "<s>", "<|endoftext|>")
# Every text a rule names: only these tokens' ids are looked up.
NAMED = frozenset(END_OF_GENERATION + GPT_OSS_USER_DEFINED + PHI3_NOT_STRIPPED + (
    "<|plamo:eos|>", "<mask>", "[MASK]") + tuple(
    text for _, texts in FILL_IN_THE_MIDDLE.values() for text in texts))


def named_ids(tokens):
    """{text: id} of the tokens whose text a rule names (of two alike, the later, as llama.cpp's
    map keeps)."""
    return {token: i for i, token in enumerate(tokens) if token in NAMED}


def fill_in_the_middle_ids(fields, ids):
    """({role: id} of the FIM roles the vocabulary has, the roles looked up by text): the
    file's key, else the token with one of the role's texts (the first listed here)."""
    roles, by_text = {}, set()
    for role, (keys, texts) in FILL_IN_THE_MIDDLE.items():
        role_id = next((fields[key] for key in keys if key in fields), None)
        if role_id is None:
            role_id = next((ids[text] for text in texts if text in ids), None)
            by_text.add(role)
        if role_id is not None:
            roles[role] = role_id
    return roles, by_text


def end_of_generation_ids(tokens, fields, eos_id, ids):
    """llama.cpp's ``special_eog_ids``, the ids a generation stops at: ``ending_ids`` less
    ``not_ending`` of them."""
    ends = ending_ids(fields, eos_id, ids)
    return ends - set(not_ending(tokens, ends).values())


def ending_ids(fields, eos_id, ids):
    """The end-of-generation ids before llama.cpp's exceptions:

        {FIM pad, repo, separator} | {tokens with an END_OF_GENERATION text} | {EOS, EOT, EOM}

    The EOT and EOM ids are the file's keys (llama.cpp's guesses by text are texts of
    END_OF_GENERATION already); ``eos_id``: the file's or the default, or None."""
    roles, _ = fill_in_the_middle_ids(fields, ids)
    ends = {roles[role] for role in ("pad", "rep", "sep") if role in roles}
    ends.update(ids[text] for text in END_OF_GENERATION if text in ids)
    ends.update(i for i in (eos_id, fields.get("eot_token_id"), fields.get("eom_token_id"))
                if i is not None)
    return ends


def not_ending(tokens, ends):
    """{text: id} of the ids llama.cpp takes out of the end-of-generation set ``ends`` (rules
    3, 4): harmony's ``<|end|>`` beside ``<|return|>`` and ``<|call|>`` (solar-open:
    ``<|calls|>`` and ``<|flush|>``); Gemma 4's and PLaMo's ``</s>`` beside
    ``<|tool_response>`` or ``<|plamo:eos|>``. Of two ids with one text, the larger (the last
    in llama.cpp's ordered set)."""
    by_text = {tokens[i]: i for i in sorted(ends)}
    out = {}
    calls = "<|call|>" in by_text or "<|calls|>" in by_text
    if "<|end|>" in by_text and calls and ("<|return|>" in by_text or "<|flush|>" in by_text):
        out["<|end|>"] = by_text["<|end|>"]
    if "</s>" in by_text and ("<|tool_response>" in by_text or "<|plamo:eos|>" in by_text):
        out["</s>"] = by_text["</s>"]
    return out


def llama_cpp_types(tokens, types, fields, eos_id, ids):
    """The token types after llama.cpp's retyping by text (rules 1-4); ``fields``: the GGUF
    tokenizer fields by short name; ``eos_id``: the EOS id (the file's or the default), or
    None; ``ids``: ``named_ids(tokens)``."""
    types = list(types)
    roles, by_text = fill_in_the_middle_ids(fields, ids)
    for role in by_text & roles.keys():
        types[roles[role]] = CONTROL
    for text in END_OF_GENERATION:
        if text in ids:
            types[ids[text]] = CONTROL
    for text in GPT_OSS_USER_DEFINED:
        if text in ids:
            types[ids[text]] = USER_DEFINED
    removed = not_ending(tokens, ending_ids(fields, eos_id, ids))
    if "<|end|>" in removed:
        types[removed["<|end|>"]] = USER_DEFINED
    if "</s>" in removed:
        types[removed["</s>"]] = NORMAL
    return types


def whitespace_flags(types, fields, ids):
    """{id: (lstrip, rstrip)} of the tokens llama.cpp gives whitespace rules by name (rule 5)."""
    name = fields.get("name", "").encode("utf-8").lower()  # std::tolower: ASCII letters only
    pre, architecture = fields.get("pre", ""), fields.get("architecture", "")
    flags = {}
    if (any(p in pre for p in ("jina-v2-de", "jina-v2-es", "jina-v2-code"))
            or any(a in architecture for a in ("nomic-bert-moe", "jina-bert-v3"))):
        if "<mask>" in ids:
            flags[ids["<mask>"]] = (True, False)
    elif b"phi-3" in name or b"phi3" in name:
        for token_id, token_type in enumerate(types):
            if token_type in MATCHED_WHOLE:
                flags[token_id] = (False, True)
        if "</s>" in ids:
            flags[ids["</s>"]] = (False, True)
        for text in PHI3_NOT_STRIPPED:
            flags.pop(ids.get(text), None)
    elif b"modern-bert" in name and "[MASK]" in ids:
        flags[ids["[MASK]"]] = (True, False)
    return flags


def gguf_special_tokens(tokens, types, fields, eos_id):
    """(the tokens matched whole, as ``AddedToken``s with llama.cpp's types and whitespace;
    the end-of-generation ids, ascending)."""
    ids = named_ids(tokens)
    types = llama_cpp_types(tokens, types, fields, eos_id, ids)
    flags = whitespace_flags(types, fields, ids)
    added = [AddedToken(i, token, special=types[i] != USER_DEFINED,
                        lstrip=flags.get(i, (False, False))[0],
                        rstrip=flags.get(i, (False, False))[1])
             for i, (token, token_type) in enumerate(zip(tokens, types))
             if token_type in MATCHED_WHOLE]
    return added, tuple(sorted(end_of_generation_ids(tokens, fields, eos_id, ids)))
