"""A process reuses a key it verified only while the auth generation in Redis holds:
against real chdb and Valkey, two ``Accounts`` (two gateways sharing the stores) see a
key revoked, or an account suspended, by the other on their very next request.

chdb allows one engine per process, so the scenario runs in its own interpreter and
prints what it saw; the assertions are here. ``calls`` counts the Redis commands and
ClickHouse statements of one authentication."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

SCENARIO = """
import asyncio, json, sys
from schemas.settings import DefaultLimits
from stores.accounts import Accounts
from stores.clickhouse import ClickHouse
from stores.redis import RedisStore
from topologies.redis_keys import AUTH_GENERATION

out = {}

async def main():
    ch = ClickHouse("chdb://" + sys.argv[1])
    await ch.start()
    redis = RedisStore(sys.argv[2], prefix=sys.argv[3])
    commands = []
    execute = redis.client.execute_command
    async def counting(*args, **kw):
        commands.append(args[0])
        return await execute(*args, **kw)
    redis.client.execute_command = counting
    one, other = Accounts(ch, redis, DefaultLimits()), Accounts(ch, redis, DefaultLimits())

    async def auth(name, accounts, key):
        commands.clear()
        before = ch.queries
        found = await accounts.authenticate(key)
        out[name] = [None if found is None else found[0].status,
                     len(commands), ch.queries - before]

    try:
        account = await other.create(email="a@example.com")
        key, _ = await other.create_key(account.id)
        spare, spare_row = await other.create_key(account.id)
        await auth("first", one, key)
        await auth("again", one, key)
        await auth("spare", one, spare)
        # a key revoked through the other process: refused by this one at once
        await other.revoke_key(spare_row.key_id)
        await auth("revoked", one, spare)
        await auth("kept_key_after_revocation", one, key)
        await auth("kept_key_again", one, key)
        # an account suspended through the other process: seen at once
        await other.update(account.id, status="suspended")
        await auth("suspended", one, key)
        await other.update(account.id, status="active")
        await auth("active", one, key)
        # the generation lost (a Redis restart): verified afresh, then a new one is kept
        await redis.delete(*AUTH_GENERATION.key())
        await auth("lost_generation", one, key)
        await auth("new_generation", one, key)
        await auth("kept_again", one, key)
    finally:
        await redis.close()
        await ch.close()
    print(json.dumps(out))

asyncio.run(main())
"""




def test_a_kept_key_is_refused_on_the_next_request_after_a_change(
        tmp_path: Path, valkey: str, own_process: Callable[..., dict]) -> None:
    out = own_process(SCENARIO, str(tmp_path / "ch"), valkey, "auth1:")
    status, commands, queries = out["first"]
    assert status == "active" and commands > 1
    # verified again: one Redis command (the generation), no ClickHouse
    assert out["again"] == ["active", 1, 0]
    assert out["spare"][0] == "active"
    assert out["revoked"][0] is None
    # the revocation moved the generation: every kept key is verified afresh, then kept
    assert out["kept_key_after_revocation"][0] == "active"
    assert out["kept_key_after_revocation"][1] > 1
    assert out["kept_key_again"] == ["active", 1, 0]
    assert out["suspended"][0] == "suspended" and out["suspended"][1] > 1
    assert out["active"][0] == "active"
    assert out["lost_generation"][0] == "active" and out["lost_generation"][1] > 1
    assert out["new_generation"][0] == "active" and out["new_generation"][1] > 1
    assert out["kept_again"] == ["active", 1, 0]
