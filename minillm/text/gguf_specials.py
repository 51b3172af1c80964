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

llama.cpp also marks control tokens named "unused" unused, and looks up the EOT and EOM ids by
text; neither changes an id.
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


def llama_cpp_types(tokens, types, fields, eos_id, ids):
    """The token types after llama.cpp's retyping by text (rules 1-4); ``fields``: the GGUF
    tokenizer fields by short name; ``eos_id``: the EOS id (the file's or the default), or
    None; ``ids``: ``named_ids(tokens)``."""
    types = list(types)
    end_ids = set()
    for role, (keys, texts) in FILL_IN_THE_MIDDLE.items():
        role_id = next((fields[key] for key in keys if key in fields), None)
        if role_id is None:
            role_id = next((ids[text] for text in texts if text in ids), None)
            if role_id is not None:
                types[role_id] = CONTROL
        if role in ("pad", "rep", "sep") and role_id is not None:
            end_ids.add(role_id)
    for text in END_OF_GENERATION:
        if text in ids:
            types[ids[text]] = CONTROL
            end_ids.add(ids[text])
    end_ids.update(i for i in (eos_id, fields.get("eot_token_id"), fields.get("eom_token_id"))
                   if i is not None)
    for text in GPT_OSS_USER_DEFINED:
        if text in ids:
            types[ids[text]] = USER_DEFINED
    ending = {tokens[i] for i in end_ids}
    calls = bool(ending & {"<|call|>", "<|calls|>"})
    if "<|end|>" in ending and calls and ending & {"<|return|>", "<|flush|>"}:
        types[ids["<|end|>"]] = USER_DEFINED
    if "</s>" in ending and ending & {"<|tool_response>", "<|plamo:eos|>"}:
        types[ids["</s>"]] = NORMAL
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


def gguf_added_tokens(tokens, types, fields, eos_id):
    """The tokens matched whole, as ``AddedToken``s with llama.cpp's types and whitespace."""
    ids = named_ids(tokens)
    types = llama_cpp_types(tokens, types, fields, eos_id, ids)
    flags = whitespace_flags(types, fields, ids)
    return [AddedToken(i, token, special=types[i] != USER_DEFINED,
                       lstrip=flags.get(i, (False, False))[0],
                       rstrip=flags.get(i, (False, False))[1])
            for i, (token, token_type) in enumerate(zip(tokens, types))
            if token_type in MATCHED_WHOLE]
