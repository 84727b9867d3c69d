"""Account states as the accounts agent keeps them: two Faust tables read as one.

``accounts`` holds each account's ``AccountState``; ``account-recent`` the pages of ids
that left it (``pipeline.accounts.RECENT_PAGE`` each), under ``<account_id>/<slot>``. Both
are written only by the accounts agent while it handles the account's event, so their
changelog records go to the event's partition and a worker that takes the partition over
recovers the state and its pages together.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, MutableMapping

from .accounts import RECENT_PAGES, AccountState, RecentPage

__all__ = ["AccountTables", "page_key", "PARSED_ACCOUNTS"]

PARSED_ACCOUNTS = 256
"""Accounts whose pages are kept parsed, the most recently read (an aged account's 4,096
ids take about 135 KiB parsed, by ``tracemalloc``); one not kept has its pages parsed again
when it is next read."""

Table = MutableMapping[str, bytes]
"""A Faust table of raw values (a dict in tests)."""


def page_key(account_id: str, number: int) -> str:
    """Where page ``number`` is kept: one slot more than the pages read, so the page being
    written never takes the slot of one a state not yet written still reads."""
    return f"{account_id}/{number % (RECENT_PAGES + 1)}"


class AccountTables:
    """Reads states with their pages' ids, and writes what ``apply`` returned.

    Parsed pages are kept per account (``PARSED_ACCOUNTS`` of them) while the table still
    holds the very values they came from (a page is written once per ``RECENT_PAGE`` ids;
    a recovery replaces values), so an event costs a few dictionary reads beside its
    state's own parse.
    """

    def __init__(self, states: Table, pages: Table) -> None:
        self.states = states
        self.pages = pages
        self._parsed: OrderedDict[str, tuple[tuple[bytes | None, ...],
                                             tuple[frozenset[str], ...]]] = OrderedDict()

    def get(self, account_id: str) -> AccountState | None:
        """The account's state, or None for an account the agent has never seen."""
        raw = self.states.get(account_id)
        return self._loaded(account_id, raw) if raw else None

    def state(self, account_id: str) -> AccountState:
        """The account's state; a new account's is empty."""
        return self.get(account_id) or AccountState()

    def items(self) -> Iterator[tuple[str, AccountState]]:
        for account_id, raw in list(self.states.items()):
            if raw:
                yield account_id, self._loaded(account_id, raw)

    def put(self, account_id: str, state: AccountState, pages: list[RecentPage]) -> None:
        """Stores ``state`` after its new pages: a crash between the two replays the event,
        which writes the same pages again."""
        for page in pages:
            self.pages[page_key(account_id, page.number)] = page.to_stored()
        self.states[account_id] = state.to_stored()

    def _loaded(self, account_id: str, raw: bytes) -> AccountState:
        state = AccountState.stored(raw)
        numbers = range(max(0, state.pages - RECENT_PAGES), state.pages)
        raws = tuple(self.pages.get(page_key(account_id, n)) for n in numbers)
        seen = self._parsed.get(account_id)
        if seen is not None and len(seen[0]) == len(raws) \
                and all(a is b for a, b in zip(seen[0], raws, strict=True)):
            self._parsed.move_to_end(account_id)
            return state.with_older(seen[1])
        older = []
        for n, page_raw in zip(numbers, raws, strict=True):
            page = RecentPage.stored(page_raw) if page_raw else None
            if page is not None and page.number == n:  # else lost, or a slot not yet reused
                older.append(frozenset(page.ids))
        self._parsed[account_id] = (raws, tuple(older))
        self._parsed.move_to_end(account_id)
        while len(self._parsed) > PARSED_ACCOUNTS:
            self._parsed.popitem(last=False)
        return state.with_older(tuple(older))
