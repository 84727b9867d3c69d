"""Which eval items are scored: real speech with a quoted reference, round-robin by source."""

from __future__ import annotations

from collections import defaultdict
from itertools import zip_longest
from typing import Any

__all__ = ["FULL_GROUPS", "SCORED_QUALITY", "choose_items", "select_items"]

SCORED_QUALITY = ("exact", "similar")

FULL_GROUPS = ("pocketsphinx", "whisper", "speechbrain", "deepspeech", "asterisk_8k")


def select_items(manifest: dict, groups: list[str], limit: int | None) -> list[dict]:
    """Real items with an exact reference, optionally filtered, round-robin across groups."""
    by_group: dict[str, list[dict]] = defaultdict(list)
    for item in manifest["items"]:
        if item["kind"] != "real" or item.get("reference_quality") not in SCORED_QUALITY:
            continue
        if not item.get("reference_text"):
            continue
        group = item["path"].split("/")[1]
        if groups and not any(g in item["path"] for g in groups):
            continue
        by_group[group].append(item)
    ordered = [i for row in zip_longest(*(sorted(v, key=lambda i: i["path"])
                                          for _, v in sorted(by_group.items())))
               for i in row if i is not None]
    return ordered[:limit] if limit else ordered


def choose_items(manifest: dict[str, Any], asterisk16: int,
                 min_seconds: float = 0.0) -> list[dict[str, Any]]:
    """Every scored item of ``FULL_GROUPS`` plus an even sample of asterisk_16k;
    with ``min_seconds``, only the items at least that long."""
    scored = [i for i in select_items(manifest, [], None)
              if not i["reference_text"].lstrip().startswith(("(", "<", "["))]
    chosen = [i for i in scored if i["path"].split("/")[1] in FULL_GROUPS]
    a16 = sorted((i for i in scored if i["path"].split("/")[1] == "asterisk_16k"),
                 key=lambda i: i["path"])
    if asterisk16 and a16:
        step = len(a16) / min(asterisk16, len(a16))
        chosen += [a16[int(k * step)] for k in range(min(asterisk16, len(a16)))]
    return sorted((i for i in chosen if (i["duration"] or 0.0) >= min_seconds),
                  key=lambda i: i["path"])
