"""docs/TESTING.md's examples run as written.

Each ```python block of the guide is either an example, run here (the blocks of one section in
order, in one namespace, as a reader would paste them), or an excerpt of a peer test, marked by
a first line `# tests/peers/<file>.py`, which must appear in that file word for word (the peer
test runs it). A section whose example needs an optional package that is missing is skipped,
saying which.
"""
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "TESTING.md"
OPTIONAL = {"torch", "transformers", "llama_cpp"}
EXCERPT = re.compile(r"# (tests/peers/\w+\.py)\n")


def sections():
    """(heading, [code blocks]) for every section with a ```python block."""
    found = []
    for part in re.split(r"^## ", GUIDE.read_text(encoding="utf-8"), flags=re.M)[1:]:
        heading = part.splitlines()[0]
        blocks = re.findall(r"^```python\n(.*?)^```", part, flags=re.M | re.S)
        if blocks:
            found.append((heading, blocks))
    return found


SECTIONS = sections()


def test_the_guide_has_examples_and_excerpts():
    blocks = [block for _, section in SECTIONS for block in section]
    assert any(EXCERPT.match(b) for b in blocks) and any(not EXCERPT.match(b) for b in blocks)


@pytest.mark.parametrize("heading, blocks", SECTIONS, ids=[h for h, _ in SECTIONS])
def test_each_example_runs_and_each_excerpt_is_in_its_file(heading, blocks):
    namespace = {"__name__": "testing_guide"}
    for block in blocks:
        excerpt = EXCERPT.match(block)
        if excerpt:
            source = (ROOT / excerpt.group(1)).read_text(encoding="utf-8")
            body = block[excerpt.end():]
            assert body in source, f"{heading}: this excerpt is not in {excerpt.group(1)}:\n{body}"
            continue
        try:
            exec(compile(block, f"docs/TESTING.md, {heading}", "exec"), namespace)
        except ModuleNotFoundError as error:
            if error.name not in OPTIONAL:
                raise
            pytest.skip(f"{heading}: needs {error.name}")
