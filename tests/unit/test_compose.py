"""docker-compose.yml cannot run here (no Docker engine), so its structure is checked instead."""

from __future__ import annotations

import yaml

from schemas.settings import Settings
from ops.stack import REPO


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_services_and_images() -> None:
    services = _compose()["services"]
    assert set(services) >= {"kafka", "clickhouse", "valkey", "minio", "gateway", "worker"}
    assert services["kafka"]["image"].startswith("apache/kafka:")
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert services["kafka"]["environment"]["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"
    assert services["clickhouse"]["image"].startswith("clickhouse/clickhouse-server:")
    assert services["gateway"]["command"] == ["gateway"]
    assert services["worker"]["command"] == ["worker"]
    assert (REPO / "Dockerfile").is_file()


def test_environment_names_are_settings() -> None:
    """Every A5S_ variable the deployment sets is a real setting, and it parses."""
    services = _compose()["services"]
    env = services["worker"]["environment"]
    assert env == services["gateway"]["environment"]
    fields = set(Settings.model_fields)
    for name in env:
        assert name.startswith("A5S_")
        assert name.removeprefix("A5S_").lower().split("__")[0] in fields, name
    s = Settings(**{k.removeprefix("A5S_").lower(): v for k, v in env.items()})
    assert not s.embedded_kafka and s.clickhouse_dsn.startswith("http://")
    assert s.object_store == "s3" and s.redis_dsn == "redis://valkey:6379/0"
    assert s.partitions == 8
