"""The JSON wire format of the loopback ClickHouse proxy (``a5s+http://``).

chdb lets one process own a data directory, so extra embedded workers reach
ClickHouse through the owner: ``gateway.clickhouse_proxy`` serves the facade's
four operations (``command``, ``query``, ``insert``, ``ping``) and
``stores.clickhouse.RemoteClickHouse`` calls them. Values keep their Python
types across the wire: every JSON object on it is a tagged value
``{"$t": tag, "v": ...}``, so a datetime comes back a datetime (with its time
zone), bytes come back bytes, and a real mapping cannot be mistaken for a tag.
"""

from __future__ import annotations

import base64
import uuid
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import Any

__all__ = ["encode", "decode", "ERRORS", "OPERATIONS"]

OPERATIONS = ("command", "query", "insert", "ping")
ERRORS = ("UpstreamUnavailable", "UpstreamTimeout", "InternalError")
"""The facade's exceptions (``stores.clickhouse.map_clickhouse_errors``) that cross the wire."""


def encode(value: Any) -> Any:
    """A JSON-ready form of ``value`` (as ``clickhouse-connect`` returns or accepts it)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, datetime):
        return {"$t": "datetime", "v": value.isoformat()}
    if isinstance(value, date):
        return {"$t": "date", "v": value.isoformat()}
    if isinstance(value, time):
        return {"$t": "time", "v": value.isoformat()}
    if isinstance(value, timedelta):
        return {"$t": "timedelta", "v": value.total_seconds()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$t": "bytes", "v": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, uuid.UUID):
        return {"$t": "uuid", "v": str(value)}
    if isinstance(value, Decimal):
        return {"$t": "decimal", "v": str(value)}
    if isinstance(value, (IPv4Address, IPv6Address)):
        return {"$t": "ip", "v": str(value)}
    if isinstance(value, dict):
        return {"$t": "map", "v": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, tuple):
        return {"$t": "tuple", "v": [encode(v) for v in value]}
    if isinstance(value, (list, set, frozenset)):
        return [encode(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return encode(value.tolist())
    raise TypeError(f"cannot send {type(value).__name__} to ClickHouse over the proxy")


_DECODERS = {
    "datetime": datetime.fromisoformat,
    "date": date.fromisoformat,
    "time": time.fromisoformat,
    "timedelta": lambda v: timedelta(seconds=v),
    "bytes": base64.b64decode,
    "uuid": uuid.UUID,
    "decimal": Decimal,
    "ip": ip_address,
}


def decode(value: Any) -> Any:
    """The inverse of :func:`encode`."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        tag, inner = value.get("$t"), value.get("v")
        if tag == "map":
            return {decode(k): decode(v) for k, v in inner}
        if tag == "tuple":
            return tuple(decode(v) for v in inner)
        if tag in _DECODERS:
            return _DECODERS[tag](inner)
        raise ValueError(f"unknown tagged value {tag!r} from the ClickHouse proxy")
    return value
