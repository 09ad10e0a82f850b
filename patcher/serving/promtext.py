"""Prometheus exposition text -> metric families: the one parser `verify --metrics` and the
rollout's gates read scrapes with (prometheus_client's own, so vLLM's output is read the way
its client library writes it). Pure: text in, families out; the scrape itself is metrics.py's."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prometheus_client is imported only when a scrape is read
    from prometheus_client.metrics_core import Metric


def families(text: str) -> Iterable[Metric]:
    """The metric families of a scrape: Prometheus text 0.0.4, or OpenMetrics when the server
    sent that (it ends in `# EOF`). Raises ValueError when the text is neither."""
    from prometheus_client.openmetrics.parser import (
        text_string_to_metric_families as openmetrics_families,
    )
    from prometheus_client.parser import text_string_to_metric_families

    if text.rstrip().endswith("# EOF"):
        found: Iterable[Metric] = openmetrics_families(text)  # type: ignore[no-untyped-call]
        return found
    return text_string_to_metric_families(text)
