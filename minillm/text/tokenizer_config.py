"""What Hugging Face keeps in ``tokenizer_config.json`` beside ``tokenizer.json``: the special
tokens by their text, whether a plain prompt gets BOS and EOS, the chat template."""
from dataclasses import asdict, dataclass
import json


@dataclass(frozen=True)
class TokenizerConfig:
    """What Hugging Face keeps in ``tokenizer_config.json`` beside ``tokenizer.json``.

    Tokens are named by their text. ``add_bos_token`` / ``add_eos_token``: whether a plain
    prompt starts with BOS / ends with EOS (None: not said, false; a chat template writes its
    own); ``chat_template``: Jinja text, or None; ``pre_tokenizer``: llama.cpp's
    name of the pre-tokenizer of a tokenizer read from GGUF (not a Hugging Face key: it keeps
    llama.cpp's rules when the tokenizer is written as tokenizer.json); ``strip_whitespace``:
    "ascii" when added tokens strip C's ``isspace`` only, as llama.cpp does (not a Hugging
    Face key either; None: Unicode's White_Space, as the Rust library does);
    ``end_of_generation_ids``: the ids the model's own runtime stops at, when its file says
    (not a Hugging Face key: llama.cpp's end-of-generation set of a GGUF file; a folder's
    ``generation_config.json`` ``eos_token_id`` with the EOS token); None: EOS and the
    end-of-turn tokens the chat template writes (``Tokenizer.eos_token_ids``).
    """
    bos_token: str | None = None
    eos_token: str | None = None
    pad_token: str | None = None
    unk_token: str | None = None
    add_bos_token: bool | None = None
    chat_template: str | None = None
    add_eos_token: bool | None = None
    pre_tokenizer: str | None = None
    strip_whitespace: str | None = None
    end_of_generation_ids: tuple[int, ...] | None = None

    @classmethod
    def from_dict(cls, data):
        """From a tokenizer_config.json object; keys this class has no field for are ignored.

        A token may be its text or ``{"content": text, ...}``; a list of named chat templates
        gives the one named "default".
        """
        values = {}
        for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
            token = data.get(name)
            if isinstance(token, dict):
                token = token.get("content")
            if token is not None and not isinstance(token, str):
                raise ValueError(f"tokenizer config: {name} must be a string, got {token!r}")
            values[name] = token
        for name in ("add_bos_token", "add_eos_token"):
            flag = data.get(name)
            if flag is not None and not isinstance(flag, bool):
                raise ValueError(f"tokenizer config: {name} must be true or false, got {flag!r}")
            values[name] = flag
        values["chat_template"] = _default_chat_template(data.get("chat_template"))
        pre_tokenizer = data.get("pre_tokenizer")
        if pre_tokenizer is not None and not isinstance(pre_tokenizer, str):
            raise ValueError(f"tokenizer config: pre_tokenizer must be a string, got "
                             f"{pre_tokenizer!r}")
        values["pre_tokenizer"] = pre_tokenizer
        strip = data.get("strip_whitespace")
        if strip not in (None, "ascii"):
            raise ValueError(f"tokenizer config: strip_whitespace must be \"ascii\" or null, got "
                             f"{strip!r}")
        values["strip_whitespace"] = strip
        values["end_of_generation_ids"] = token_ids(data.get("end_of_generation_ids"),
                                                    "end_of_generation_ids")
        return cls(**values)

    @classmethod
    def from_json(cls, text):
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("tokenizer config: expected a JSON object")
        return cls.from_dict(data)

    def to_json(self):
        """A JSON object with this class's fields, as in tokenizer_config.json."""
        return json.dumps(asdict(self), ensure_ascii=False)


def _default_chat_template(template):
    """The chat template text: a string, or the "default" of a list of named templates."""
    if isinstance(template, list):
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        if "default" not in named:
            raise ValueError(f"tokenizer config: no chat template named 'default' among "
                             f"{sorted(map(str, named))}")
        template = named["default"]
    if template is not None and not isinstance(template, str):
        raise ValueError(f"tokenizer config: chat_template must be a string, got "
                         f"{type(template).__name__}")
    return template


def token_ids(value, name):
    """A tuple of token ids from a JSON value (a list of non-negative integers, or one; None
    stays None)."""
    if value is None:
        return None
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ValueError(f"{name} must be a token id or a list of token ids, got {value!r}")
    return tuple(values)
