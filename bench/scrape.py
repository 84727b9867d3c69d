"""The service's ``GET /metrics`` text, read with prometheus-client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["samples"]


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """The labels and value of every sample called ``name`` (a counter's with ``_total``)."""
    return [(s.labels, s.value) for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == name]
