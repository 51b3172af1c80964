"""WeightsError, in a module of its own so that every reader of weights files (the `.npz`
loader, the GGUF reader, the tokenizer's GGUF keys) can raise it without importing another."""


class WeightsError(ValueError):
    """A weights file that cannot be read as a minillm model; the message names the problem."""
