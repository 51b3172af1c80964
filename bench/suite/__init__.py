"""What `python -m bench` runs: the workloads behind bench/RESULTS.md and their machinery.

Workloads (each a `run(ctx) -> (title, rows)`): decode, cache, batch, prefill, speculative,
int8, tokenizer, and on the real model (SmolLM2-135M-Instruct, read from minillm's cache
folder; `real` finds its files and prompts): real_decode (each contender in a real_worker
process), real_passes, real_speculative, real_batch, real_long (long contexts, real_worker
processes too); goals checks the run's figures against the targets. Machinery: contenders (the
models, built once per run), timing (interleaved repeats), table (Markdown), shapes (the sizes
of a full and a --quick run), machine (threads and the run's header), hf and torch_loop (the
peers), roofline (bandwidth and bytes per token), plots (PNG charts).
"""
