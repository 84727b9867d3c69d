"""Topic set-up against the embedded broker: declared topics, and changelogs made before
their settings changed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ops.embedded import EmbeddedStack
from schemas.settings import EmbeddedPorts, Settings
from stores.kafka import changelog_names, ensure_topics, topic_configs, topic_name
from ops.stack import free_port
from topologies.topics import CHANGELOG_CONFIG, TOPICS

pytestmark = pytest.mark.stack


@contextlib.asynccontextmanager
async def _admin(settings: Settings) -> AsyncIterator[AIOKafkaAdminClient]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def _configs(settings: Settings, names: list[str]) -> dict[str, dict[str, str]]:
    async with _admin(settings) as admin:
        return await topic_configs(admin, names)


async def _topics(settings: Settings) -> set[str]:
    async with _admin(settings) as admin:
        return set(await admin.list_topics())


async def _create_old_changelog(settings: Settings, name: str) -> None:
    async with _admin(settings) as admin:
        await admin.create_topics([NewTopic(name, settings.partitions, 1,
                                            topic_configs={"cleanup.policy": "compact"})])


def test_declared_topics_are_created_and_old_changelogs_get_their_settings(
        tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data",
                        embedded=EmbeddedPorts(kafka=free_port(), redis=free_port()))
    broker = EmbeddedStack(settings)
    broker.start()
    try:
        accounts, recent, webhooks = changelog_names(settings)
        assert accounts == "a5s-accounts-changelog"  # the name Faust gives the table's log
        # A data directory from before CHANGELOG_CONFIG: Faust made this one, compacted only.
        asyncio.run(_create_old_changelog(settings, accounts))
        created = asyncio.run(ensure_topics(settings))
        assert set(created) == {topic_name(settings, t) for t in TOPICS}
        configs = asyncio.run(_configs(settings, [accounts, topic_name(settings, TOPICS[0])]))
        assert configs[accounts]["cleanup.policy"] == "compact"
        for key, value in CHANGELOG_CONFIG.items():
            assert configs[accounts][key] == value
        assert configs[topic_name(settings, TOPICS[0])]["cleanup.policy"] == "delete"

        assert asyncio.run(ensure_topics(settings)) == []  # a second start changes nothing
        assert not {recent, webhooks} & asyncio.run(_topics(settings))  # Faust makes them
    finally:
        broker.stop()
