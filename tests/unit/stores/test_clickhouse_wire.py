"""The loopback ClickHouse proxy's wire format: values keep their Python types."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal

import pytest

from stores.clickhouse_wire import decode, encode


def roundtrip(value: object) -> object:
    return decode(json.loads(json.dumps(encode(value))))


def test_rows_survive_the_trip() -> None:
    rows = [{"id": "tr_1", "created_at": datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
             "naive": datetime(2026, 1, 2, 3, 4, 5), "day": date(2026, 1, 2),
             "words": [("hello", 0.1, 0.5)], "meta": {"ref": 42, "$t": "not a tag"},
             "blob": b"\x00\xffa5s", "uid": uuid.UUID(int=7), "price": Decimal("1.25"),
             "took": timedelta(seconds=1.5), "none": None, "ok": True, "n": 3, "x": 0.25}]
    back = roundtrip(rows)
    assert back == rows
    assert back[0]["created_at"].utcoffset() == timedelta(0)  # type: ignore[index]
    assert back[0]["naive"].tzinfo is None  # type: ignore[index]


def test_other_time_zones_keep_their_offset() -> None:
    at = datetime(2026, 5, 6, 7, 8, 9, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    assert roundtrip(at) == at and roundtrip(at).utcoffset() == at.utcoffset()  # type: ignore


def test_unknown_values_are_refused() -> None:
    with pytest.raises(TypeError):
        encode(object())
    with pytest.raises(ValueError):
        decode({"$t": "pickle", "v": "..."})
