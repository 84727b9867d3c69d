"""The clients one process holds, built once from ``Settings`` by its entry point."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from schemas.api import ComponentHealth
from schemas.settings import Settings

from .accounts import Accounts
from .clickhouse import PROXY_SCHEME, ClickHouse, RemoteClickHouse
from .kafka import Producer
from .metrics import Metrics
from .objects import FileStore, ObjectStore, S3Store
from .redis import RedisStore

__all__ = ["Context", "build_objects", "build_clickhouse"]

log = logging.getLogger(__name__)


def build_objects(settings: Settings) -> ObjectStore:
    if settings.object_store == "s3":
        return S3Store(endpoint=settings.s3_endpoint, bucket=settings.s3_bucket,
                       region=settings.s3_region,
                       access_key=settings.s3_access_key.get_secret_value(),
                       secret_key=settings.s3_secret_key.get_secret_value())
    return FileStore(settings.data_path / "objects")


def build_clickhouse(settings: Settings) -> ClickHouse | RemoteClickHouse:
    """chdb or a server by URL; ``a5s+http://`` is the owner's loopback proxy (extra
    embedded workers), authenticated with the console token."""
    if settings.clickhouse_dsn.startswith(PROXY_SCHEME):
        def token() -> str:
            secret = settings.console_token.get_secret_value()
            return secret or (settings.data_path / "console.token").read_text().strip()
        return RemoteClickHouse(settings.clickhouse_dsn, settings.clickhouse_database, token)
    return ClickHouse(settings.clickhouse_dsn, settings.clickhouse_database,
                      batch_s=settings.clickhouse_batch_s)


@dataclass
class Context:
    settings: Settings
    ch: ClickHouse | RemoteClickHouse
    redis: RedisStore
    objects: ObjectStore
    producer: Producer
    accounts: Accounts
    extras: dict[str, object] = field(default_factory=dict)
    metrics: Metrics = field(default_factory=Metrics)
    """This process's Prometheus registry (served at ``GET /metrics``)."""

    def __post_init__(self) -> None:
        self.metrics.count_statements(self.ch)

    @classmethod
    def build(cls, settings: Settings) -> Context:
        ch = build_clickhouse(settings)
        redis = RedisStore(settings.redis_dsn)
        return cls(settings=settings, ch=ch, redis=redis, objects=build_objects(settings),
                   producer=Producer(settings), accounts=Accounts(ch, redis, settings.limits))

    async def start(self, *, producer: bool = True) -> None:
        await self.ch.start()
        if isinstance(self.objects, S3Store):
            await self.objects.ensure_bucket()
        if producer:
            await self.producer.start()

    async def close(self) -> None:
        await self.producer.stop()
        await self.redis.close()
        await self.ch.close()

    async def health(self) -> dict[str, ComponentHealth]:
        async def probe(name: str, check: object) -> tuple[str, ComponentHealth]:
            try:
                ms = await asyncio.wait_for(check, timeout=3)  # type: ignore[arg-type]
                return name, ComponentHealth(ok=True, latency_ms=round(ms, 2))
            except Exception as exc:  # reported, not raised: health shows every component
                return name, ComponentHealth(ok=False, detail=type(exc).__name__ + ": " +
                                             str(getattr(exc, "log", None) or exc)[:200])
        checks = [probe("clickhouse", self.ch.ping()), probe("redis", self.redis.ping()),
                  probe("objects", self.objects.ping()), probe("kafka", self.producer.ping())]
        return dict(await asyncio.gather(*checks))
