"""Grafana dashboards over ClickHouse, built from the saved queries in ``ops/queries``."""
