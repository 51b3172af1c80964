"""Extract plain text derived from the World English Bible for training the shipped models.

Source: the Debian package ``sword-text-web`` (the SWORD module ``engWEB2015eb``, the World
English Bible with Deuterocanon, public domain). The module is dumped with ``mod2imp`` from
Debian's ``libsword-utils``; that dump has one entry per verse::

    $$$Genesis 1:1
    <w lemma="strong:H0430">In</w> <w ...>the</w> ... <note ...>a footnote</note> ...

This script turns the OSIS markup into plain text:

* footnotes (``<note>``), section and book titles (``<title>``) and introductions (verse 0)
  are dropped; every other tag is removed and its text kept (line and paragraph marks
  become a space, inline marks such as ``<w>`` nothing);
* curly quotes become ``'`` and ``"``, an em dash ``--``, an en dash ``-``;
* whitespace is collapsed; the verses of one chapter form one paragraph.

Every 20th chapter, counted over the whole text (chapters 19, 39, 59, ... from 0), is held out
as validation text (5%). The rest is the training text: one document per book, which the
training script separates with the special token ``<|endoftext|>``.

Usage::

    apt-get install sword-text-web libsword-utils
    python weights/prepare_corpus.py --train /tmp/minillm-build/web_train.txt \\
        --valid weights/web_valid.txt
"""

import argparse
import html
import json
import os
import re
import subprocess

MODULE = "engWEB2015eb"
HOLD_OUT_EVERY = 20

ENTRY_KEY = re.compile(r"^\$\$\$(.+) (\d+):(\d+)$")
DROPPED_ELEMENTS = re.compile(r"<(note|title)\b[^>]*>.*?</\1>", re.DOTALL)
BREAK_TAGS = re.compile(r"</?(?:div|l|lg|lb|chapter|milestone|item|list|speaker)\b[^>]*>")
ANY_TAG = re.compile(r"<[^>]*>")
PUNCTUATION = {
    "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"',
    "\u2014": "--", "\u2013": "-",
}


def read_module_dump(module=MODULE):
    """Run ``mod2imp`` and return its output: the module's entries as text."""
    return subprocess.run(["mod2imp", module], check=True, capture_output=True,
                          text=True, encoding="utf-8").stdout


def osis_to_text(markup):
    """Plain text of one verse's OSIS markup (notes and titles dropped, quotes in ASCII)."""
    text = DROPPED_ELEMENTS.sub(" ", markup)
    text = BREAK_TAGS.sub(" ", text)     # line, paragraph and division marks separate words
    text = ANY_TAG.sub("", text)         # inline marks (<w>, <q>, ...) do not
    text = html.unescape(text)
    for curly, plain in PUNCTUATION.items():
        text = text.replace(curly, plain)
    text = " ".join(text.split())
    # Removing tags leaves a space before punctuation that followed a tag: "God ,".
    return re.sub(r" ([,.;:!?)\]])", r"\1", text)


def parse_chapters(dump):
    """Yield ``(book, chapter, text)`` for every chapter of the dump, in order."""
    book = chapter = None
    verses = []
    key = None
    lines = []

    def flush_verse():
        if key is not None and key[2] != 0:        # verse 0 holds headings and prefaces
            text = osis_to_text("\n".join(lines))
            if text:
                verses.append(text)

    for line in dump.splitlines():
        if line.startswith("$$$"):
            flush_verse()
            match = ENTRY_KEY.match(line)
            key = (match.group(1), int(match.group(2)), int(match.group(3))) if match else None
            if key is not None and key[:2] != (book, chapter):
                if verses:
                    yield book, chapter, " ".join(verses)
                book, chapter, verses = key[0], key[1], []
            lines = []
        else:
            lines.append(line)
    flush_verse()
    if verses:
        yield book, chapter, " ".join(verses)


def split_corpus(chapters, every=HOLD_OUT_EVERY):
    """Split chapters into (train books, held-out chapters): every ``every``-th chapter out.

    Returns a list of (book, text) documents for training and a list of chapter texts.
    """
    books, held_out = {}, []
    for index, (book, _, text) in enumerate(chapters):
        if index % every == every - 1:
            held_out.append(text)
        else:
            books.setdefault(book, []).append(text)
    documents = [(book, "\n\n".join(parts)) for book, parts in books.items()]
    return documents, held_out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default="/tmp/minillm-build/web_train.txt",
                        help="training text (JSON list of book texts); not shipped")
    parser.add_argument("--valid", default=os.path.join(os.path.dirname(__file__),
                                                        "web_valid.txt"))
    args = parser.parse_args()

    documents, held_out = split_corpus(parse_chapters(read_module_dump()))
    leftover = {ch for text in held_out for ch in text} | {
        ch for _, text in documents for ch in text}
    non_ascii = sorted(ch for ch in leftover if ord(ch) > 127)

    os.makedirs(os.path.dirname(os.path.abspath(args.train)), exist_ok=True)
    with open(args.train, "w", encoding="utf-8") as f:
        json.dump([text for _, text in documents], f, ensure_ascii=False)
    with open(args.valid, "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n".join(held_out) + "\n")
    n_train = sum(len(text) for _, text in documents)
    n_valid = sum(len(text) for text in held_out)
    print(f"{len(documents)} books, {n_train:,} training characters, "
          f"{len(held_out)} held-out chapters, {n_valid:,} held-out characters")
    print("non-ASCII characters left:", "".join(non_ascii))


if __name__ == "__main__":
    main()
