"""What the test modules share: a byte tokenizer (model strategies: minillm.testing.strategies)
and the check that an import graph has no cycle."""
from minillm.text.tokenizer import BYTE_TO_CHAR, Tokenizer


def byte_tokenizer():
    """256 byte tokens, one merge ('Ġ' + 't'), and an end-of-text token: 258 ids."""
    vocab = {char: byte for byte, char in BYTE_TO_CHAR.items()}
    vocab["Ġt"] = 256
    return Tokenizer(vocab, [("Ġ", "t")],
                     added_tokens=[{"id": 257, "content": "<|endoftext|>", "special": True}])


def topological_order(graph: dict) -> list:
    """The modules of `graph` (module -> the modules it imports), each after what it imports;
    an AssertionError naming the cycle if there is one. A module importing its own package
    (its __init__) points up, not round, and is not followed."""
    order, done, active = [], set(), []

    def visit(module):
        if module in done:
            return
        assert module not in active, "import cycle: " + " -> ".join(
            active[active.index(module):] + [module])
        active.append(module)
        for dependency in sorted(graph[module]):
            if not module.startswith(dependency + "."):
                visit(dependency)
        active.pop()
        done.add(module)
        order.append(module)

    for module in sorted(graph):
        visit(module)
    return order
