"""Reading a running member's ``/metrics`` in tests: one parser (prometheus_client's), not a scraper per file."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample


def samples(node: Any) -> list[Sample]:
    """Every sample ``node`` (a ``NodeProcess``) exports now; the scrape itself must succeed."""
    status, text = node.http_get("/metrics")
    assert status == 200, f"/metrics answered {status}: {text[:200]}"
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def metric_sum(node: Any, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0 when there are none yet)."""
    return sum(s.value for s in samples(node)
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))
