"""The prefix-cache hit rate a self-hosted engine (`route=local`) reached on a run's requests.

A case's prompts of one job begin alike (system prompt, job description: tests/test_prompt_layout.py),
so an engine that caches prefixes (vLLM's automatic prefix caching, SGLang's radix cache) computes
that start once. vLLM exposes, in Prometheus' text format at `{server}/metrics`, counters of the
prompt tokens it looked up in its prefix cache and of those it found (`vllm:prefix_cache_queries`,
`vllm:prefix_cache_hits`; `vllm:gpu_prefix_cache_*` in earlier versions): read before and after a
run's requests, their increments give the run's own hit rate, the run metric
`served.prefix_cache_hit_rate` (with `served.prefix_cache_queried_tokens`). An engine that reports
only a running rate (SGLang's `sglang:cache_hit_rate`, vLLM V0's `vllm:gpu_prefix_cache_hit_rate`)
gives that gauge after the run, `served.prefix_cache_engine_hit_rate` (its own window, not only
this run's requests). Where the server has no such metric, or no /metrics, the log says so once
per server and process; the run records nothing."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("popfair.screen")

COUNTERS = (  # (hits, queries): the families of prompt tokens found in / looked up in the prefix cache
    ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries"),
    ("vllm:gpu_prefix_cache_hits", "vllm:gpu_prefix_cache_queries"),
)
GAUGES = ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate")  # a running rate, in [0, 1]
_SAID: set[str] = set()  # servers whose missing metric was logged (once per process)


def read_families(text: str, model: str) -> dict[str, float]:
    """Each counter's total (its `_total` samples) and each gauge's value, by family name, summed over
    the label sets that are the served model's (`model_name`, where a sample has that label)."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            counted = sample.name == f"{family.name}_total" if family.type == "counter" else sample.name == family.name
            if counted and sample.labels.get("model_name", model) == model:
                values[family.name] = values.get(family.name, 0.0) + float(sample.value)
    return values


class PrefixCacheMeter:
    """Reads a server's /metrics before (`start`) and after (`stop`) a run's requests; `metrics` are
    the run's prefix-cache figures (empty where the server exposes none)."""

    def __init__(self, root: str, model: str, timeout_s: float = 5.0) -> None:
        self.url, self.model, self.timeout_s = f"{root.rstrip('/')}/metrics", model, timeout_s
        self.before: dict[str, float] | None = None
        self.metrics: dict[str, float] = {}

    def read(self) -> dict[str, float] | None:
        """The families of /metrics (None, said once, where it cannot be read or has no prefix cache)."""
        import requests

        try:
            response = requests.get(self.url, timeout=self.timeout_s)
            response.raise_for_status()
            values = read_families(response.text, self.model)
        except (requests.RequestException, ValueError) as exc:
            self._say(f"cannot read {self.url} ({type(exc).__name__}: {str(exc)[:160]})")
            return None
        if not any(hits in values and queries in values for hits, queries in COUNTERS) and not set(GAUGES) & set(
            values
        ):
            names = ", ".join([*(name for pair in COUNTERS for name in pair), *GAUGES])
            self._say(f"{self.url} reports no prefix-cache metric ({names})")
            return None
        return values

    def _say(self, reason: str) -> None:
        if self.url not in _SAID:
            _SAID.add(self.url)
            log.warning("served model %s: prefix-cache hit rate not recorded: %s", self.model, reason)
        return None

    def start(self) -> None:
        self.before, self.metrics = self.read(), {}

    def stop(self) -> dict[str, float]:
        """The run's figures: the hit rate over the prompt tokens the engine looked up since `start`
        (none when it looked up none: every answer came from popfair's cache), or the engine's gauge."""
        after = self.read() if self.before is not None else None
        if after is None or self.before is None:
            return self.metrics
        for hits, queries in COUNTERS:
            if hits in after and queries in after:
                asked = after[queries] - self.before.get(queries, 0.0)
                if asked > 0:
                    found = after[hits] - self.before.get(hits, 0.0)
                    self.metrics["served.prefix_cache_hit_rate"] = found / asked
                    self.metrics["served.prefix_cache_queried_tokens"] = asked
                return self.metrics
        gauge: Any = next((after[name] for name in GAUGES if name in after), None)
        if gauge is not None:
            self.metrics["served.prefix_cache_engine_hit_rate"] = float(gauge)
        return self.metrics
