"""A fixture for the peers' tiny models."""
import pytest


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models: torch's worker threads only wait on each other (a transformers generate
    call costs 0.3 s with two threads on two busy cores, 0.03 s with one)."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
