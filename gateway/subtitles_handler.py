"""``GET /v1/transcripts/{id}/subtitles?format=srt|vtt&chars_per_caption=N``.

``format`` defaults to ``srt``; ``chars_per_caption`` (10 to 200) defaults to 42 and
bounds the cue text after the speaker label (see ``gateway/subtitles.py``). The body is
the caption text itself, ``application/x-subrip`` or ``text/vtt``, UTF-8.
"""

from __future__ import annotations

from typing import Literal

from schemas.errors import InvalidRequest, NotFound, TranscriptNotReady
from schemas.records import TranscriptResult
from schemas.rows import TranscriptRow
from stores.context import Context

from .base import BaseHandler
from .jobs import JobService
from .subtitles import CaptionOptions, render_srt, render_vtt

__all__ = ["SubtitlesHandler", "parse_subtitle_query", "completed_result",
           "completed_row_result", "SUBTITLE_TYPES", "DEFAULT_CHARS"]

SUBTITLE_TYPES = {"srt": "application/x-subrip", "vtt": "text/vtt"}
DEFAULT_CHARS = 42
MIN_CHARS, MAX_CHARS = 10, 200


def parse_subtitle_query(fmt: str | None,
                         chars: str | None) -> tuple[Literal["srt", "vtt"], CaptionOptions]:
    fmt = "srt" if fmt is None else fmt
    if fmt not in SUBTITLE_TYPES:
        raise InvalidRequest("format must be srt or vtt.", param="format")
    try:
        n = DEFAULT_CHARS if chars is None else int(chars)
    except ValueError:
        n = 0
    if not MIN_CHARS <= n <= MAX_CHARS:
        raise InvalidRequest(f"chars_per_caption must be an integer from {MIN_CHARS} to "
                             f"{MAX_CHARS}.", param="chars_per_caption")
    return fmt, CaptionOptions(chars_per_caption=n)  # type: ignore[return-value]


async def completed_row_result(jobs: JobService, account_id: str, transcript_id: str,
                               ) -> tuple[TranscriptRow, TranscriptResult]:
    """The transcript's row and the result captions are made from; 404 for no such
    transcript, 409 until it completes."""
    row = await jobs.transcripts.get(transcript_id, account_id)
    if row is None:
        raise NotFound(f"No transcript {transcript_id!r}.")
    result = (await jobs.transcripts.result(row.id, account_id)
              if row.status == "completed" else None)
    if result is None:
        raise TranscriptNotReady(f"Transcript {transcript_id!r} is {row.summary().status}; "
                                 "captions exist once it is completed.")
    return row, result


async def completed_result(jobs: JobService, account_id: str,
                           transcript_id: str) -> TranscriptResult:
    """The result captions are made from (see :func:`completed_row_result`)."""
    return (await completed_row_result(jobs, account_id, transcript_id))[1]


class SubtitlesHandler(BaseHandler):
    QUERY = {"GET": ("format", "chars_per_caption")}

    def initialize(self, ctx: Context, jobs: JobService) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.jobs = jobs

    async def get(self, transcript_id: str) -> None:
        who = await self.authenticate()
        fmt, options = parse_subtitle_query(self.get_query_argument("format", None),
                                            self.get_query_argument("chars_per_caption", None))
        result = await completed_result(self.jobs, who.account.id, transcript_id)
        text = render_srt(result, options) if fmt == "srt" else render_vtt(result, options)
        self.set_header("Content-Type", SUBTITLE_TYPES[fmt])
        self.finish(text.encode())
