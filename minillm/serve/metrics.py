"""GET /metrics: the server's counts in Prometheus' text format, under vLLM's names with the
prefix `minillm:` (so a dashboard made for vLLM needs only the prefix changed).

    minillm:num_requests_running        gauge      engine requests in the running batch
    minillm:num_requests_waiting        gauge      engine requests waiting to run
    minillm:kv_blocks_in_use            gauge      KV-cache blocks held by a request
    minillm:kv_blocks_free              gauge      blocks on the free list (and cached, below)
    minillm:kv_blocks_cached            gauge      blocks held by nobody, kept for their prefix
    minillm:prompt_tokens_total         counter    prompt tokens of the requests given to the engine
    minillm:generation_tokens_total     counter    tokens drawn
    minillm:prefix_cache_queries_total  counter    prompt positions the engine has had to compute
    minillm:prefix_cache_hits_total     counter      of those, found in the prefix cache
    minillm:num_preemptions_total       counter    requests sent back to wait for room
    minillm:request_success_total       counter    choices finished, by finished_reason
    minillm:requests_refused_total      counter    requests answered 429 (a full queue)
    minillm:time_to_first_token_seconds histogram  from a request's arrival to each choice's
                                                   first token
    minillm:inter_token_latency_seconds histogram  between two tokens of a choice
    minillm:e2e_request_latency_seconds histogram  from a request's arrival to its last token

The histograms are timed on the event loop, as the tokens reach the handler: what a client sees,
less the network. Every series carries the label model_name.
"""
from __future__ import annotations

import bisect

# vLLM's buckets (seconds)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
               60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class Histogram:
    def __init__(self, buckets):
        self.buckets, self.counts = buckets, [0] * (len(buckets) + 1)  # the last: +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    def lines(self, name: str, label: str) -> list[str]:
        out, total = [], 0
        for le, count in zip([*map(repr, self.buckets), "+Inf"], self.counts):
            total += count
            out.append(f'{name}_bucket{{{label},le="{le}"}} {total}')
        return out + [f"{name}_sum{{{label}}} {self.sum!r}", f"{name}_count{{{label}}} {total}"]


class Metrics:
    """The counts the handlers keep (on the event loop's thread: no lock)."""

    def __init__(self):
        self.prompt_tokens = self.generation_tokens = 0
        self.finished = {}  # finished_reason -> count
        self.ttft, self.itl = Histogram(TTFT_BUCKETS), Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)

    def text(self, name: str, stats: dict) -> str:
        """The exposition, with the engine's `stats` (EngineLoop.stats) for the gauges."""
        label = "model_name=\"" + name.replace("\\", "\\\\").replace("\"", "\\\"") + "\""
        series = [
            ("num_requests_running", "gauge", "Engine requests in the running batch.",
             stats["running"]),
            ("num_requests_waiting", "gauge", "Engine requests waiting to run.",
             stats["waiting"]),
            ("kv_blocks_in_use", "gauge", "KV-cache blocks held by a request.",
             stats["blocks_in_use"]),
            ("kv_blocks_free", "gauge", "KV-cache blocks on the free list.", stats["blocks_free"]),
            ("kv_blocks_cached", "gauge", "KV-cache blocks kept for their prefix only.",
             stats["blocks_cached"]),
            ("prompt_tokens_total", "counter", "Prompt tokens given to the engine.",
             self.prompt_tokens),
            ("generation_tokens_total", "counter", "Tokens drawn.", self.generation_tokens),
            ("prefix_cache_queries_total", "counter", "Prompt positions to compute.",
             stats["prompt_tokens_computed"] + stats["prompt_tokens_reused"]),
            ("prefix_cache_hits_total", "counter", "Prompt positions found in the prefix cache.",
             stats["prompt_tokens_reused"]),
            ("num_preemptions_total", "counter", "Requests sent back to wait for room.",
             stats["preemptions"]),
            ("requests_refused_total", "counter", "Requests answered 429.", stats["refused"]),
        ]
        lines = []
        for metric, kind, help_text, value in series:
            lines += [f"# HELP minillm:{metric} {help_text}", f"# TYPE minillm:{metric} {kind}",
                      f"minillm:{metric}{{{label}}} {value}"]
        lines += ["# HELP minillm:request_success_total Choices finished, by finished_reason.",
                  "# TYPE minillm:request_success_total counter"]
        for reason in sorted(set(self.finished) | {"stop", "length"}):
            lines.append(f'minillm:request_success_total{{{label},finished_reason="{reason}"}} '
                         f"{self.finished.get(reason, 0)}")
        for metric, histogram, help_text in (
                ("time_to_first_token_seconds", self.ttft, "From arrival to a first token."),
                ("inter_token_latency_seconds", self.itl, "Between two tokens of a choice."),
                ("e2e_request_latency_seconds", self.e2e, "From arrival to the last token.")):
            lines += [f"# HELP minillm:{metric} {help_text}", f"# TYPE minillm:{metric} histogram",
                      *histogram.lines(f"minillm:{metric}", label)]
        return "\n".join(lines) + "\n"
