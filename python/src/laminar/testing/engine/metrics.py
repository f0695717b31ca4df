"""`GET /metrics` of the reference engine: SGLang's Prometheus names, in the text format."""

from __future__ import annotations

from typing import Iterable

from .scheduler import Scheduler


def _labels(model_name: str) -> str:
    # SGLang's scheduler labels, in prometheus_client's (sorted) order.
    escaped = model_name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'{{engine_type="unified",model_name="{escaped}",pp_rank="0",tp_rank="0"}}'


def _metric(name: str, kind: str, help_text: str, labels: str, value: float) -> Iterable[str]:
    yield f"# HELP {name} {help_text}"
    yield f"# TYPE {name} {kind}"
    yield f"{name}{labels} {float(value)!r}"


def render(scheduler: Scheduler, model_name: str) -> str:
    """The exposition text (updated every step, where SGLang updates every decode-log interval)."""
    labels = _labels(model_name)
    used = scheduler.kv_used
    lines: list[str] = []
    lines += _metric("sglang:num_running_reqs", "gauge", "The number of running requests.", labels, len(scheduler.running))
    lines += _metric("sglang:num_used_tokens", "gauge", "The number of used tokens.", labels, used)
    lines += _metric("sglang:token_usage", "gauge", "The token usage.", labels, used / scheduler.kv_capacity)
    lines += _metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).", labels, scheduler.gen_throughput())
    lines += _metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.", labels, len(scheduler.waiting))
    lines += _metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.", labels, scheduler.prompt_tokens_total)
    lines += _metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.", labels, scheduler.generation_tokens_total)
    lines += _metric("sglang:num_requests_total", "counter", "Number of requests processed.", labels, scheduler.requests_total)
    lines += _metric(
        "sglang:num_retracted_requests_total",
        "counter",
        "Number of retracted requests (pause in retract mode, priority preemption).",
        labels,
        scheduler.retracted_total,
    )
    lines += _metric("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.", labels, scheduler.cached_tokens_total)
    lines += _metric("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.", labels, scheduler.cache_hit_rate())
    return "\n".join(lines) + "\n"
