"""An account's state and its pages of left ids, read and written as the accounts agent does."""

from __future__ import annotations

from datetime import UTC, datetime

from pipeline.account_tables import AccountTables, page_key
from pipeline.accounts import RECENT_MAX, RECENT_PAGE, RECENT_PAGES, AccountState, apply
from schemas.records import AccountLimits, Canceled, Finished, Submitted

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = AccountLimits(usage_limit_seconds=100, max_concurrent_jobs=2)


def handle(tables: AccountTables, event: object):
    """The agent's read, apply and write of one event."""
    new, fx = apply(tables.state("a"), event, NOW)  # type: ignore[arg-type]
    tables.put("a", new, fx.pages)
    return new, fx


def cancel(tid: str) -> Canceled:
    return Canceled(account_id="a", transcript_id=tid, at=NOW)


def test_left_ids_move_to_pages_and_every_one_of_the_last_recent_max_is_recognised() -> None:
    states: dict[str, bytes] = {}
    pages: dict[str, bytes] = {}
    tables = AccountTables(states, pages)
    ids = [f"tr_{i:05d}" for i in range(RECENT_MAX + 2 * RECENT_PAGE + 7)]
    for tid in ids:
        handle(tables, cancel(tid))
    state = tables.state("a")
    assert state.pages == len(ids) // RECENT_PAGE and len(state.recent) == len(ids) % RECENT_PAGE
    assert len(states["a"]) < 16 * 1024, "the state written on every event stays small"
    assert sorted(pages) == sorted(page_key("a", n) for n in range(RECENT_PAGES + 1))
    remembered = ids[-RECENT_MAX:]
    # A worker that recovers the two tables (nothing parsed yet) reads the same.
    for reader in (tables, AccountTables(states, pages)):
        assert all(reader.state("a").has_left(tid) for tid in remembered)
    assert not state.has_left(ids[0]), "older than the last pages: forgotten, as before"
    # A replayed submit of a remembered id is not queued again; a replayed finish settles
    # again without counting.
    oldest = remembered[0]
    state, fx = handle(tables, Submitted(account_id="a", transcript_id=oldest, at=NOW,
                                         limits=LIMITS))
    assert state.queue == [] and fx.dispatch == []
    state, fx = handle(tables, Finished(account_id="a", transcript_id=oldest,
                                        status="completed", duration=5))
    assert [s.transcript_id for s in fx.settled] == [oldest] and state.used == 0


def test_a_state_stored_before_pages_moves_its_ids_on_its_next_event() -> None:
    old = [f"old{i}" for i in range(RECENT_MAX)]
    states = {"a": AccountState(recent=old).to_stored()}
    pages: dict[str, bytes] = {}
    tables = AccountTables(states, pages)
    assert all(tables.state("a").has_left(tid) for tid in old)
    handle(tables, Submitted(account_id="a", transcript_id="t0", at=NOW, limits=LIMITS))
    assert len(pages) == RECENT_MAX // RECENT_PAGE and len(states["a"]) < 2048
    again = AccountTables(states, pages).state("a")
    assert again.recent == [] and all(again.has_left(tid) for tid in old[RECENT_PAGE:])
    assert "t0" in again.processing


def test_a_page_missing_or_of_another_number_is_not_read() -> None:
    """A slot holds one page at a time; a page lost (or a slot still holding the page
    before) leaves only its own ids unrecognised."""
    states: dict[str, bytes] = {}
    pages: dict[str, bytes] = {}
    tables = AccountTables(states, pages)
    ids = [f"tr_{i:05d}" for i in range(3 * RECENT_PAGE)]
    for tid in ids:
        handle(tables, cancel(tid))
    del pages[page_key("a", 1)]
    pages[page_key("a", 2)] = pages[page_key("a", 0)]   # page 0 where page 2 belongs
    state = AccountTables(states, pages).state("a")
    assert state.pages == 3
    assert all(state.has_left(tid) for tid in ids[:RECENT_PAGE])
    assert not any(state.has_left(tid) for tid in ids[RECENT_PAGE:])
    assert AccountTables(states, pages).get("b") is None
    assert [account for account, _ in tables.items()] == ["a"]


def test_parsed_pages_are_kept_for_the_accounts_read_last_only(monkeypatch) -> None:
    """Reading more accounts than are kept parsed drops the oldest; each still reads right."""
    import pipeline.account_tables as account_tables

    monkeypatch.setattr(account_tables, "PARSED_ACCOUNTS", 2)
    states: dict[str, bytes] = {}
    pages: dict[str, bytes] = {}
    tables = AccountTables(states, pages)
    for account in ("a", "b", "c"):
        for n in range(RECENT_PAGE):
            new, fx = apply(tables.state(account), Canceled(
                account_id=account, transcript_id=f"{account}{n}", at=NOW), NOW)
            tables.put(account, new, fx.pages)
    assert list(tables._parsed) == ["b", "c"]
    assert tables.state("a").has_left("a0") and not tables.state("a").has_left("b0")
    assert list(tables._parsed) == ["c", "a"]
