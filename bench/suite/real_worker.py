"""One contender of the real-model decode table, in a process of its own.

    python -m bench.suite.real_worker CONTENDER THREADS [CONTEXT]
                                   (started by bench.suite.real_decode and real_long)

The process sets its thread count, loads its model, then answers the parent, one JSON line
per message on stdin and stdout:

    child:  {"ready": true, "load_s": ..., "bytes_per_token": ..., "about": "..."}
            (or {"error": "..."} when the contender cannot run here)
    parent: {"prompt": [ids], "new": n}   ->  child: {"prefill_s": ..., "decode_s": ...,
                                                       "tokens": [n ids], "peak_rss_mib": ...}
    parent: {"quit": true}                ->  child: {"peak_rss_mib": ...}, and exits

A run is greedy decoding of n new tokens after the prompt, into a fresh cache. The clock reads
at the start, when the first new token is known (the prefill: one pass over the prompt, then
its argmax) and after the n-th: prefill_s and decode_s (the n - 1 one-token steps).
The peak resident memory is the process's own (VmHWM), from loading to the last run.
CONTEXT: the positions llama.cpp allocates (its n_ctx; 512 by default), for long prompts.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time

CONTENDERS = ("minillm f32", "minillm int8", "minillm int8 + emb", "PyTorch loop",
              "transformers", "llama.cpp")
LLAMA_BUILD = ('CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON" '
               'pip install llama-cpp-python')
TORCH_CONTEXT = 512  # the PyTorch loop's preallocated cache, as llama.cpp's n_ctx


def timed(tokens, n: int):
    """(prefill_s, decode_s, the first n tokens) of an iterator over new tokens."""
    start = time.perf_counter()
    first, out = start, []
    for token in tokens:
        out.append(int(token))
        if len(out) == 1:
            first = time.perf_counter()
        if len(out) == n:
            break
    return first - start, time.perf_counter() - first, out


def load_minillm(name, npz):
    """A runner of minillm: float32, or int8 (with the embeddings too for "+ emb")."""
    import minillm
    from minillm.generate import stream

    from .real import EMB_MISSING, has_embeddings_option
    from .roofline import bytes_per_token

    model = minillm.load(npz)
    if name != "minillm f32":
        if name.endswith("+ emb") and not has_embeddings_option():
            raise LookupError(EMB_MISSING)
        model = minillm.quantize(model, **({"embeddings": True} if name.endswith("+ emb")
                                           else {}))

    def run(prompt, n):
        return timed(stream(model, prompt, max_new_tokens=n, temperature=0, stop_tokens=()), n)
    about = "peak includes the float32 load before quantizing" if "int8" in name else ""
    return run, bytes_per_token(model), about


def load_torch_loop(npz):
    """bench.suite.torch_loop over the .npz's float32 weights (minillm's reference layout)."""
    import dataclasses

    import numpy as np

    import minillm

    from . import torch_loop
    from .roofline import bytes_per_token

    model = minillm.load(npz, fast=False)  # params in minillm's plain layout, as torch reads it
    cfg, params, rope = torch_loop.load(model)
    net = (dataclasses.replace(cfg, context_length=TORCH_CONTEXT), params, rope)

    def run(prompt, n):
        steps = torch_loop.stream(net, np.array([prompt]), n)
        return timed((step[0] for step in steps), n)
    return run, bytes_per_token(model), f"cache of {TORCH_CONTEXT} positions"


def load_transformers(gguf):
    """transformers reading the GGUF file, dequantized to float32 (the same weights)."""
    import torch
    import transformers

    folder, name = os.path.split(gguf)
    net = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                            dtype=torch.float32).eval()
    weights = sum(p.nbytes for p in net.parameters())  # the tied head counted once
    row = net.get_input_embeddings().weight[0].nbytes

    class Clock:  # generate() calls put() with the prompt, then with each new token
        def __init__(self):
            self.times = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    def run(prompt, n):
        clock = Clock()
        ids = torch.tensor([prompt])
        start = time.perf_counter()
        with torch.inference_mode():
            out = net.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                               max_new_tokens=n, min_new_tokens=n, eos_token_id=None,
                               pad_token_id=0, use_cache=True, streamer=clock)
        end = time.perf_counter()
        return clock.times[1] - start, end - clock.times[1], out[0, len(prompt):].tolist()
    return run, weights + row, "float32, dequantized from the GGUF file"


def load_llama_cpp(gguf, threads, context=TORCH_CONTEXT):
    """llama.cpp (llama-cpp-python) on the original Q4_1 file: it reads ~5x fewer bytes."""
    try:
        import llama_cpp
    except ImportError:
        raise LookupError(f"llama-cpp-python not installed; with AVX2: {LLAMA_BUILD}") from None
    import gguf as gguf_reader

    llm = llama_cpp.Llama(model_path=gguf, n_ctx=context, n_batch=512, n_threads=threads,
                          n_threads_batch=threads, verbose=False)
    weights = sum(int(t.n_bytes) for t in gguf_reader.GGUFReader(gguf).tensors)

    def run(prompt, n):
        llm.reset()  # forget the previous run: no reuse of a cached prefix
        return timed(llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                  repeat_penalty=1.0), n)
    return run, weights, (f"llama-cpp-python {llama_cpp.__version__}, Q4_1 blocks and Q8_0 "
                          "embedding: reads the file's bytes, not float32")


def load(name, threads, context=TORCH_CONTEXT):
    from .real import files

    npz, gguf = files()
    if name.startswith("minillm"):
        return load_minillm(name, npz)
    if name == "PyTorch loop":
        return load_torch_loop(npz)
    if name == "transformers":
        return load_transformers(gguf)
    if name == "llama.cpp":
        return load_llama_cpp(gguf, threads, context)
    raise ValueError(f"unknown contender {name!r}; one of {CONTENDERS}")


def peak_rss_mib() -> float:
    """The process's peak resident memory, MiB: VmHWM, the high-water mark of its own memory
    since it started this program. (getrusage's ru_maxrss is not used: Linux carries it over
    from the forking parent's memory across exec.)"""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def send(message):
    print(json.dumps(message), flush=True)


def main(argv=None) -> int:
    args = argv or sys.argv[1:]
    name, threads = args[0], int(args[1])
    context = int(args[2]) if len(args) > 2 else TORCH_CONTEXT
    from .machine import set_threads

    set_threads(threads)
    start = time.perf_counter()
    try:
        run, weights, about = load(name, threads, context)
    except Exception as e:  # the parent reports the contender as missing
        send({"error": f"{type(e).__name__}: {e}" if not isinstance(e, LookupError)
              else str(e)})
        return 0
    send({"ready": True, "load_s": time.perf_counter() - start, "bytes_per_token": weights,
          "about": about})
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("quit"):
            break
        prefill_s, decode_s, tokens = run(message["prompt"], message["new"])
        send({"prefill_s": prefill_s, "decode_s": decode_s, "tokens": tokens,
              "peak_rss_mib": peak_rss_mib()})
    send({"peak_rss_mib": peak_rss_mib()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
