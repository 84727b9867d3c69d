"""Topic set-up against the embedded broker: declared topics, and changelogs made before
their settings changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from ops.embedded import EmbeddedStack
from schemas.settings import EmbeddedPorts, Settings
from stores.kafka import changelog_names, ensure_topics, topic_name
from tests.stack import free_port
from topologies.topics import CHANGELOG_CONFIG, TOPICS

pytestmark = pytest.mark.stack


async def _configs(settings: Settings, names: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names])
        return {name: {e[0]: e[1] for e in entries}
                for response in described for _, _, _, name, entries in response.resources}
    finally:
        await admin.close()


async def _topics(settings: Settings) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


async def _create_old_changelog(settings: Settings, name: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, settings.partitions, 1,
                                            topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()


def test_declared_topics_are_created_and_old_changelogs_get_their_settings(
        tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data",
                        embedded=EmbeddedPorts(kafka=free_port(), redis=free_port()))
    broker = EmbeddedStack(settings)
    broker.start()
    try:
        accounts, webhooks = changelog_names(settings)
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
        assert webhooks not in asyncio.run(_topics(settings))  # Faust's to make, not ours
    finally:
        broker.stop()
