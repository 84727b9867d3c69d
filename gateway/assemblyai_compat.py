"""``/v2``: AssemblyAI's batch API over the batch model, for the official ``assemblyai`` SDK.

A client written against AssemblyAI changes its base URL and key and nothing else. Every
route maps shapes only: a transcript is created, read, listed and deleted through the same
``JobService`` as ``/v1/transcripts`` (same keys, accounts, rate limit, quota, FIFO queue
and usage ledger), and an upload is stored like ``POST /v1/files``.

* ``POST /v2/upload`` (raw bytes) -> ``{"upload_url"}``, an URL of this server that
  ``POST /v2/transcript`` recognises and turns into the upload's ``file_id``; any other
  ``audio_url`` is fetched like ``/v1``'s.
* ``POST /v2/transcript``, ``GET /v2/transcript`` (list), ``GET``/``DELETE
  /v2/transcript/{id}``, ``GET /v2/transcript/{id}/srt|vtt?chars_per_caption=N``.
* ``GET /v2/transcript/{id}/redacted-audio`` -> ``{"status": "redacted_audio_ready",
  "redacted_audio_url"}`` for a job created with ``redact_pii_audio``; the URL,
  ``/v2/transcript/{id}/redacted-audio.mp3|wav``, downloads the file with the key or,
  signed, without it for 24 hours (as AssemblyAI's presigned URL, which its SDK fetches
  bare).

Differences from ``/v1`` a client sees: the key is sent bare in ``Authorization`` (as the SDK
does; ``Bearer`` is accepted too); successes are ``200``; times are milliseconds and
speakers letters (``speaker_1`` -> ``A``); errors are ``{"error": "<message>"}``, the key
the SDK reads, on the same HTTP status as ``/v1``; the webhook body is AssemblyAI's
``{transcript_id, status}``, still signed with the account's webhook secret. Options a5s
cannot honour are refused with a message that says so (``schemas.assemblyai.REFUSED``);
``docs/compat.md`` lists every field.

The options that shape the answer (``speaker_labels``, ``speakers_expected``,
``speaker_options``, ``punctuate``, ``format_text``, ``multichannel``, ``keyterms_prompt``,
``word_boost``, ``boost_param``, ``webhook_auth_header_name``, the ``redact_pii`` ones) are
kept in the transcript's metadata under ``assemblyai``, so they live and are deleted with the
transcript. Words are shown in the form ``punctuate`` and ``format_text`` ask for
(``schemas.word_forms``). Those that shape the job (``speaker_labels``: whether it is
diarized; the speaker count or bounds; ``multichannel``; the PII to redact; the key terms,
``JobSpec.vocabulary``) go into its spec (``job_fields``).

``multichannel`` transcribes each channel on its own (``JobSpec.multichannel``): the result's
``speaker_<n>`` is channel ``n``, answered as AssemblyAI does, ``channel`` and ``speaker``
``"n"`` on each word and utterance, with ``audio_channels``.

PII redaction itself happens in the pipeline (``pipeline.redaction``), before the words are
first stored.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime
from typing import Any, get_args
from urllib.parse import urlencode, urlsplit

from schemas.api import (CreateTranscript, DeletedTranscript, Transcript, TranscriptSummary, Word,
                         normalise_language)
from schemas.assemblyai import (BOOST_STRENGTH, KEYTERM_MAX_CHARS, KEYTERM_MAX_WORDS,
                                KEYTERMS_MAX, KEYTERMS_MAX_CHARS, KEYTERMS_STRENGTH,
                                PII_POLICIES_REFUSED, REFUSED, AaiCreateTranscript, AaiError,
                                AaiPageDetails, AaiRedactedAudio, AaiRedactedAudioPending,
                                AaiSpeakerOptions, AaiTranscript, AaiTranscriptItem,
                                AaiTranscriptList, AaiUpload, AaiUtterance, AaiWord, is_off)
from schemas.errors import A5sError, FileTooLarge, InvalidRequest, NotFound, UploadUrlInvalid
from schemas.records import PiiPolicy, PiiRedaction, TranscriptResult
from security.signing import sign_url, url_signature_matches
from security.tokens import bearer_token
from stores.context import Context
from stores.objects import ObjectMissing
from topologies.objects import JobFiles

from .base import (BaseHandler, BodyTooLargeHandler, NotFoundHandler, Principal, WrongMethodHandler,
                   parse_body, principal_for)
from .files import FilesHandler, upload_signing_key
from .jobs import JobService
from .subtitles import render_srt, render_vtt
from .subtitles_handler import SUBTITLE_TYPES, completed_row_result, parse_subtitle_query
from .transcripts import parse_list_query

__all__ = ["aai_routes", "create_body", "job_fields", "pii_redaction", "vocabulary_of",
           "aai_transcript", "aai_list", "speaker_letter", "speaker_channel", "upload_url",
           "upload_file_id", "unlabelled", "text_switches", "redacted_audio_path", "OPTIONS_KEY",
           "WORD_CONFIDENCE", "REDACTED_AUDIO_URL_TTL_S"]

OPTIONS_KEY = "assemblyai"
"""The metadata key under which a ``/v2`` transcript keeps the options that shape its answer."""
WORD_CONFIDENCE = 1.0
"""The confidence of a word whose result predates stored confidences; the SDK requires one."""
UPLOAD_PATH = "/v2/upload/"
DELETED_URL = "http://deleted_by_user"
"""What AssemblyAI answers as the ``audio_url`` of a deleted transcript."""
_UPLOAD = re.compile(r"/v2/upload/(file_[0-9A-Za-z]+)")
_SPEAKER = re.compile(r"speaker_(\d+)")
_LANGUAGES = {"en_uk": "en-gb"}
"""AssemblyAI language codes a5s spells differently; the rest go to ``normalise_language``."""
_REDACT = ("redact_pii_policies", "redact_pii_sub", "redact_pii_audio",
           "redact_pii_audio_quality", "redact_pii_audio_options")
_AUDIO_TYPES = {"mp3": "audio/mpeg", "wav": "audio/wav"}
REDACTED_AUDIO_URL_TTL_S = 24 * 3600
"""How long a signed redacted-audio URL works (AssemblyAI's presigned URL lasts as long)."""


# --- pure mappings ------------------------------------------------------------------------------

def speaker_letter(speaker: str) -> str:
    """``speaker_1`` -> ``A``, ``speaker_26`` -> ``Z``, ``speaker_27`` -> ``AA``."""
    m = _SPEAKER.fullmatch(speaker)
    if not m or int(m.group(1)) < 1:
        return speaker
    n, letters = int(m.group(1)), ""
    while n:
        n, r = divmod(n - 1, 26)
        letters = chr(ord("A") + r) + letters
    return letters


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def upload_url(base_url: str, file_id: str) -> str:
    return f"{base_url}{UPLOAD_PATH}{file_id}"


def upload_file_id(url: str, hosts: set[str]) -> str | None:
    """The upload behind ``url`` when it is one of this server's ``upload_url``s."""
    parts = urlsplit(url)
    m = _UPLOAD.fullmatch(parts.path)
    return m.group(1) if m and parts.netloc in hosts and not parts.query else None


def pii_redaction(req: AaiCreateTranscript) -> PiiRedaction | None:
    """What ``redact_pii`` and its options ask for; refuses what a5s cannot redact."""
    if not req.redact_pii:
        for name in _REDACT:
            if not is_off(getattr(req, name)):
                raise InvalidRequest(f"{name} needs redact_pii set to true.", param=name)
        return None
    policies = req.redact_pii_policies or []
    if not policies:
        raise InvalidRequest("redact_pii_policies must list at least one policy when "
                             "redact_pii is true.", param="redact_pii_policies")
    for name in policies:
        if name in PII_POLICIES_REFUSED:
            raise InvalidRequest(f"PII policy {name} is not supported: "
                                 f"{PII_POLICIES_REFUSED[name]}.", param="redact_pii_policies")
        if name not in get_args(PiiPolicy):
            raise InvalidRequest(f"Unknown PII policy {name!r}: it is not an AssemblyAI "
                                 "redaction policy.", param="redact_pii_policies")
    sub = req.redact_pii_sub or "hash"
    if sub not in ("hash", "entity_name"):
        raise InvalidRequest(f"redact_pii_sub {sub!r} is not supported: use hash or "
                             "entity_name.", param="redact_pii_sub")
    quality = req.redact_pii_audio_quality or "mp3"
    if quality not in _AUDIO_TYPES:
        raise InvalidRequest(f"redact_pii_audio_quality {quality!r} is not supported: use mp3 "
                             "or wav.", param="redact_pii_audio_quality")
    if req.redact_pii_audio and req.multichannel:
        raise InvalidRequest("redact_pii_audio with multichannel is not supported: a5s writes "
                             "the redacted audio of a single-channel job only (the text of "
                             "each channel is redacted).", param="redact_pii_audio")
    options = dict(req.redact_pii_audio_options or {})
    method = options.pop("override_audio_redaction_method", None) or "beep"
    if options or method not in ("beep", "silence"):
        raise InvalidRequest("redact_pii_audio_options takes only "
                             "override_audio_redaction_method: silence.",
                             param="redact_pii_audio_options")
    return PiiRedaction(policies=list(dict.fromkeys(policies)), substitution=sub,
                        audio=bool(req.redact_pii_audio), audio_method=method,
                        audio_format=quality)


def redacted_audio_path(transcript_id: str, fmt: str) -> str:
    return f"/v2/transcript/{transcript_id}/redacted-audio.{fmt}"


def create_body(req: AaiCreateTranscript, hosts: set[str]) -> dict[str, Any]:
    """The ``/v1`` create body for an AssemblyAI request; refuses what a5s cannot honour."""
    for name, value in (req.model_extra or {}).items():
        if name not in REFUSED:
            raise InvalidRequest(f"Unknown field {name!r}: it is not an AssemblyAI batch option "
                                 "a5s knows.", param=name)
        if not is_off(value):
            raise InvalidRequest(f"{name} is not supported: {REFUSED[name]}.", param=name)
    _check_speaker_hints(req)
    if req.multichannel and req.speaker_labels:
        raise InvalidRequest("speaker_labels with multichannel is not supported: a5s does not "
                             "diarize within a channel; with multichannel each channel is one "
                             "speaker. Leave out one of the two.", param="speaker_labels")
    redaction = pii_redaction(req)
    vocabulary_of(req)
    language = req.language_code or "en"
    try:
        language = normalise_language(_LANGUAGES.get(language.lower(), language))
    except A5sError as exc:
        raise InvalidRequest(f"language_code {language!r} is not supported: a5s transcribes "
                             "English only (en, en_us, en_uk, en_au).",
                             param="language_code") from exc
    body: dict[str, Any] = {
        "language_code": language,
        "metadata": {OPTIONS_KEY: {
            "speaker_labels": bool(req.speaker_labels),
            "speakers_expected": req.speakers_expected,
            "speaker_options": _bounds(req.speaker_options), "punctuate": req.punctuate,
            "format_text": req.format_text, "keyterms_prompt": req.keyterms_prompt,
            "word_boost": req.word_boost, "boost_param": req.boost_param,
            **({"multichannel": True} if req.multichannel else {}),
            "webhook_auth_header_name": req.webhook_auth_header_name,
            **({"redact_pii": True, "redact_pii_policies": redaction.policies,
                "redact_pii_sub": redaction.substitution,
                "redact_pii_audio": redaction.audio,
                "redact_pii_audio_quality": redaction.audio_format} if redaction else {})}},
    }
    file_id = upload_file_id(req.audio_url, hosts)
    if file_id is not None:
        body["file_id"] = file_id
    else:
        body["audio_url"] = req.audio_url
    for name in ("webhook_url", "webhook_auth_header_name", "webhook_auth_header_value"):
        if getattr(req, name) is not None:
            body[name] = getattr(req, name)
    return body


def vocabulary_of(req: AaiCreateTranscript) -> list[tuple[str, int]] | None:
    """The job's key terms as ``(term, strength)`` (the live sessions' custom vocabulary):
    ``keyterms_prompt``, or ``word_boost`` at the strength ``boost_param`` names. Refuses
    both at once, ``boost_param`` alone, and terms past the limits."""
    if req.keyterms_prompt and req.word_boost:
        raise InvalidRequest("Give key terms in keyterms_prompt or in word_boost, not both.",
                             param="word_boost")
    if req.boost_param is not None and not req.word_boost:
        raise InvalidRequest("boost_param needs word_boost.", param="boost_param")
    name = "keyterms_prompt" if req.keyterms_prompt else "word_boost"
    terms = req.keyterms_prompt or req.word_boost
    if not terms:
        return None
    if len(terms) > KEYTERMS_MAX:
        raise InvalidRequest(f"{name} takes at most {KEYTERMS_MAX} terms; {len(terms)} were "
                             "given.", param=name)
    for term in terms:
        if not term.strip() or len(term) > KEYTERM_MAX_CHARS \
                or len(term.split()) > KEYTERM_MAX_WORDS:
            raise InvalidRequest(f"Each {name} term must be 1 to {KEYTERM_MAX_CHARS} "
                                 f"characters and at most {KEYTERM_MAX_WORDS} words; "
                                 f"{term[:40]!r} is not.", param=name)
    if sum(len(t) for t in terms) > KEYTERMS_MAX_CHARS:
        raise InvalidRequest(f"{name} terms may hold {KEYTERMS_MAX_CHARS} characters in all "
                             "(the model's prompt holds no more).", param=name)
    strength = (BOOST_STRENGTH[req.boost_param or "default"] if req.word_boost
                else KEYTERMS_STRENGTH)
    return [(t.strip(), strength) for t in terms]


_SPEAKER_TUNING = "a5s has one diarization method; its speaker_options take only " \
    "min_speakers_expected and max_speakers_expected"


def _check_speaker_hints(req: AaiCreateTranscript) -> None:
    """AssemblyAI's rules for the speaker count: a count or bounds, each with speaker_labels."""
    options = req.speaker_options
    for name, value in ((options.model_extra or {}) if options else {}).items():
        if not is_off(value):
            raise InvalidRequest(f"speaker_options.{name} is not supported: {_SPEAKER_TUNING}.",
                                 param=f"speaker_options.{name}")
    bounds = options is not None and options.asks()
    for name, given in (("speakers_expected", req.speakers_expected is not None),
                        ("speaker_options", bounds)):
        if given and not req.speaker_labels:
            raise InvalidRequest(f"{name} needs speaker_labels set to true.", param=name)
    if bounds and req.speakers_expected is not None:
        raise InvalidRequest("Give either speakers_expected (an exact count) or "
                             "speaker_options (a range), not both.", param="speaker_options")


def _bounds(options: AaiSpeakerOptions | None) -> dict[str, int] | None:
    """The bounds a request gives, as stored and answered; None when it gives none."""
    if options is None or not options.asks():
        return None
    return options.model_dump(include={"min_speakers_expected", "max_speakers_expected"},
                              exclude_none=True)


def job_fields(req: AaiCreateTranscript) -> dict[str, Any]:
    """What a ``/v2`` request adds to the job's spec: whether it is diarized (AssemblyAI
    diarizes only with ``speaker_labels``), the speaker count or bounds, multichannel, the PII
    to redact and the key terms."""
    bounds = _bounds(req.speaker_options) or {}
    return {"diarize": bool(req.speaker_labels), "speakers_expected": req.speakers_expected,
            **bounds, "multichannel": bool(req.multichannel), "redaction": pii_redaction(req),
            "vocabulary": vocabulary_of(req)}


_Key = tuple[float, float, str]


def speaker_channel(speaker: str) -> str:
    """A multichannel result's speaker as AssemblyAI names its channel: ``speaker_2`` -> ``2``."""
    m = _SPEAKER.fullmatch(speaker)
    return m.group(1) if m else speaker


def text_switches(options: dict[str, Any]) -> tuple[bool, bool]:
    """``(punctuate, format_text)`` of a ``/v2`` transcript's stored options; each defaults
    to true, as AssemblyAI's do."""
    return (options.get("punctuate") is not False, options.get("format_text") is not False)


def _words(words: list[Word], labels: bool, confidence: dict[_Key, float],
           channels: bool = False, shown: list[Word] | None = None) -> list[AaiWord]:
    """AssemblyAI's words; ``shown`` (same order) gives the text to show, ``words`` the
    verbatim form that keys ``confidence``."""
    return [AaiWord(text=s.text, start=_ms(w.start), end=_ms(w.end),
                    confidence=confidence.get((w.start, w.end, w.text), WORD_CONFIDENCE),
                    speaker=(speaker_channel(w.speaker) if channels else
                             speaker_letter(w.speaker) if labels else None),
                    channel=speaker_channel(w.speaker) if channels else None)
            for w, s in zip(words, words if shown is None else shown, strict=True)]


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def _audio_url(summary: TranscriptSummary, base_url: str) -> str:
    if summary.audio_url:
        return summary.audio_url
    return upload_url(base_url, summary.file_id) if summary.file_id else DELETED_URL


def aai_transcript(transcript: Transcript, base_url: str,
                   result: TranscriptResult | None = None) -> AaiTranscript:
    """A ``/v1`` transcript in AssemblyAI's shape; ``result`` (its stored result) gives the
    words in the form ``punctuate`` and ``format_text`` ask for (``schemas.word_forms``) and
    the word confidences: the recogniser's word probabilities, and their mean for the
    transcript and for each utterance."""
    options = transcript.metadata.get(OPTIONS_KEY) or {}
    punctuate, format_text = text_switches(options)
    confidence: dict[_Key, float] = {}
    if result is not None and len(result.word_confidence) == len(result.words):
        confidence = {(w.start, w.end, w.text): c
                      for w, c in zip(result.words, result.word_confidence)}
    # A transcript created under /v1 was diarized: its speakers are shown.
    labels = bool(options.get("speaker_labels")) if OPTIONS_KEY in transcript.metadata else True
    channels = bool(options.get("multichannel"))
    out = AaiTranscript(
        id=transcript.id, status=transcript.status,
        audio_url=_audio_url(transcript, base_url), language_code=transcript.language_code,
        punctuate=punctuate, format_text=format_text,
        speaker_labels=labels, speakers_expected=options.get("speakers_expected"),
        multichannel=True if channels else None,
        keyterms_prompt=options.get("keyterms_prompt"), word_boost=options.get("word_boost"),
        boost_param=options.get("boost_param"), speaker_options=options.get("speaker_options"),
        webhook_url=transcript.webhook_url,
        webhook_auth=options.get("webhook_auth_header_name") is not None,
        webhook_auth_header_name=options.get("webhook_auth_header_name"),
        webhook_status_code=transcript.webhook_status_code,
        redact_pii=bool(options.get("redact_pii")),
        redact_pii_policies=options.get("redact_pii_policies"),
        redact_pii_sub=options.get("redact_pii_sub"),
        redact_pii_audio=options.get("redact_pii_audio"),
        redact_pii_audio_quality=options.get("redact_pii_audio_quality"),
        audio_duration=(round(transcript.audio_duration)
                        if transcript.audio_duration is not None else None),
        error=transcript.error.message if transcript.error else None)
    if transcript.status == "completed":
        if result is None:  # a result-less view: the transcript's own (verbatim) fields
            result = TranscriptResult(text=transcript.text or "", words=transcript.words or [],
                                      utterances=transcript.utterances or [])
        shown = result.in_form(punctuate, format_text)
        out.text = shown.text
        out.words = _words(result.words, labels, confidence, channels, shown.words)
        out.confidence = _mean([w.confidence for w in out.words]) if confidence else None
        if channels:
            out.audio_channels = result.audio_channels if result is not None else None
        if labels or channels:
            out.utterances = []
            for u, su in zip(result.utterances, shown.utterances, strict=True):
                words = _words(u.words, True, confidence, channels, su.words)
                mean = _mean([w.confidence for w in words])
                out.utterances.append(AaiUtterance(
                    text=su.text, start=_ms(u.start), end=_ms(u.end),
                    confidence=WORD_CONFIDENCE if mean is None else mean,
                    speaker=speaker_channel(u.speaker) if channels else speaker_letter(u.speaker),
                    channel=speaker_channel(u.speaker) if channels else None, words=words))
    return out


def _deleted(summary: DeletedTranscript) -> AaiTranscript:
    """AssemblyAI answers a delete with the transcript emptied."""
    return AaiTranscript(id=summary.id, status=summary.status, audio_url=DELETED_URL,
                         text="Deleted by user.",
                         error=summary.error.message if summary.error else None)


def _stamp(value: datetime | None) -> str | None:
    return value.astimezone(UTC).replace(tzinfo=None).isoformat() if value else None


def aai_list(page: list[TranscriptSummary], has_more: bool, limit: int, base_url: str,
             current_url: str, status: str | None) -> AaiTranscriptList:
    """A page of ``GET /v2/transcript``, newest first; ``prev_url`` leads to older ones."""
    prev_url = None
    if has_more and page:
        query = {"limit": limit, **({"status": status} if status else {}),
                 "before_id": page[-1].id}
        prev_url = f"{base_url}/v2/transcript?{urlencode(query)}"
    items = [AaiTranscriptItem(
        id=s.id, resource_url=f"{base_url}/v2/transcript/{s.id}", status=s.status,
        created=_stamp(s.created_at) or "", completed=_stamp(s.completed_at),
        audio_url=_audio_url(s, base_url), error=s.error.message if s.error else None)
        for s in page]
    return AaiTranscriptList(transcripts=items, page_details=AaiPageDetails(
        limit=limit, result_count=len(items), current_url=current_url, prev_url=prev_url))


def unlabelled(result: TranscriptResult) -> TranscriptResult:
    """The result without speakers: AssemblyAI's captions carry no speaker labels."""
    def strip(words: list[Word]) -> list[Word]:
        return [w.model_copy(update={"speaker": ""}) for w in words]
    return result.model_copy(update={
        "words": strip(result.words),
        "utterances": [u.model_copy(update={"speaker": "", "words": strip(u.words)})
                       for u in result.utterances]})


# --- handlers -----------------------------------------------------------------------------------

class _AaiErrors:
    """AssemblyAI's error body and authentication, mixed in before the a5s base class."""

    ctx: Context
    request: Any
    request_id: str | None
    principal: Principal | None

    def error_body(self, error: A5sError) -> str:
        return AaiError(error=error.message).model_dump_json()

    async def authenticate(self) -> Principal:
        """The key as the SDK sends it: bare in ``Authorization`` (``Bearer`` also taken)."""
        header = self.request.headers.get("Authorization", "")
        token = bearer_token(header)
        self.principal = await principal_for(self.ctx, header.strip() if token is None
                                             else token)
        return self.principal


class _AaiWrongMethod(_AaiErrors, WrongMethodHandler):
    pass


class _AaiBodyTooLarge(_AaiErrors, BodyTooLargeHandler):
    pass


class AaiNotFoundHandler(_AaiErrors, NotFoundHandler):
    """The transcript sub-resources the SDK knows and a5s lacks (``sentences``,
    ``paragraphs``, ``word-search``): 404 in AssemblyAI's shape. Other unknown paths,
    ``/v2`` included, get the server's usual 404."""

    def answer(self) -> A5sError:
        return NotFound(f"No route for {self.request.path}: a5s has no sentences, paragraphs "
                        "or word search.")


class _AaiRoute(_AaiErrors):
    wrong_method_handler = _AaiWrongMethod
    body_too_large_handler = _AaiBodyTooLarge

    @property
    def base_url(self) -> str:
        return self.ctx.settings.base_url  # type: ignore[no-any-return]


class AaiUploadHandler(_AaiRoute, FilesHandler):
    """``POST /v2/upload``: the raw body is the file, as ``POST /v1/files``."""

    def too_large(self) -> FileTooLarge:
        return FileTooLarge(f"An upload is limited to {self.limit} bytes.")

    async def post(self) -> None:
        if await self.save() is not None:
            self.send(AaiUpload(upload_url=upload_url(self.base_url, self.file_id)))


class _AaiJobs(_AaiRoute, BaseHandler):
    def initialize(self, ctx: Context, jobs: JobService) -> None:  # type: ignore[override]
        super().initialize(ctx)
        self.jobs = jobs


class AaiTranscriptsHandler(_AaiJobs):
    """``POST /v2/transcript`` (create) and ``GET /v2/transcript`` (list)."""

    QUERY = {"POST": (), "GET": ("limit", "status", "before_id", "after_id", "created_on",
                                 "throttled_only")}

    async def post(self) -> None:
        who = await self.authenticate()
        req = parse_body(AaiCreateTranscript, self.request.body)
        hosts = {urlsplit(self.base_url).netloc, self.request.host}
        raw = json.dumps(create_body(req, hosts)).encode()
        transcript, _ = await self.jobs.create(who, raw, None, CreateTranscript,
                                               webhook_format="assemblyai",
                                               spec_fields=job_fields(req))
        self.send(aai_transcript(transcript, self.base_url))

    async def get(self) -> None:
        who = await self.authenticate()
        for name in ("after_id", "created_on"):
            if self.get_query_argument(name, None) is not None:
                raise InvalidRequest(f"{name} is not supported: a5s pages from newest to "
                                     "oldest with limit, status and before_id.", param=name)
        if self.get_query_argument("throttled_only", "false").lower() != "false":
            raise InvalidRequest("throttled_only is not supported: a5s does not throttle "
                                 "transcripts.", param="throttled_only")
        limit, status, before = parse_list_query(self.get_query_argument("limit", "10"),
                                                 self.get_query_argument("status", None),
                                                 self.get_query_argument("before_id", None))
        rows = await self.jobs.transcripts.list(who.account.id, limit=limit + 1, status=status,
                                                before=before)
        page = [r.summary() for r in rows[:limit]]
        self.send(aai_list(page, len(rows) > limit, limit, self.base_url,
                           self.base_url + self.request.uri, status))


class AaiTranscriptHandler(_AaiJobs):
    """``GET`` and ``DELETE /v2/transcript/{id}``."""

    QUERY = {"GET": (), "DELETE": ()}

    async def get(self, transcript_id: str) -> None:
        who = await self.authenticate()
        found = await self.jobs.get_with_result(who.account.id, transcript_id)
        assert found is not None  # missing_ok is False: a missing transcript raises
        transcript, result = found
        self.send(aai_transcript(transcript, self.base_url, result))

    async def delete(self, transcript_id: str) -> None:
        who = await self.authenticate()
        self.send(_deleted(await self.jobs.delete(who, transcript_id)))


class AaiSubtitlesHandler(_AaiJobs):
    """``GET /v2/transcript/{id}/srt`` and ``/vtt``: captions without speaker labels, in the
    text form of the transcript (``punctuate``, ``format_text``)."""

    QUERY = {"GET": ("chars_per_caption",)}

    async def get(self, transcript_id: str, fmt: str) -> None:
        who = await self.authenticate()
        _, options = parse_subtitle_query(fmt, self.get_query_argument("chars_per_caption", None))
        row, result = await completed_row_result(self.jobs, who.account.id, transcript_id)
        asked = row.summary().metadata.get(OPTIONS_KEY) or {}
        result = unlabelled(result.in_form(*text_switches(asked)))
        text = render_srt(result, options) if fmt == "srt" else render_vtt(result, options)
        self.set_header("Content-Type", SUBTITLE_TYPES[fmt])
        self.finish(text.encode())


class AaiRedactedAudioHandler(_AaiJobs):
    """``GET /v2/transcript/{id}/redacted-audio``: where to download the redacted audio."""

    QUERY = {"GET": ()}

    async def get(self, transcript_id: str) -> None:
        who = await self.authenticate()
        transcript = await self.jobs.get(who.account.id, transcript_id)
        assert transcript is not None  # missing_ok is False: a missing transcript raises
        options = transcript.metadata.get(OPTIONS_KEY) or {}
        if not options.get("redact_pii_audio"):
            raise InvalidRequest("This transcript has no redacted audio: it was created "
                                 "without redact_pii and redact_pii_audio.")
        if transcript.status in ("queued", "processing"):
            return self.send(AaiRedactedAudioPending(status=transcript.status), 202)
        if transcript.status == "error":
            raise InvalidRequest("This transcript failed, so it has no redacted audio.")
        path = redacted_audio_path(transcript_id, options.get("redact_pii_audio_quality", "mp3"))
        expires = int(time.time()) + REDACTED_AUDIO_URL_TTL_S
        signature = sign_url(upload_signing_key(self.ctx.settings), "GET", path, expires)
        self.send(AaiRedactedAudio(redacted_audio_url=f"{self.base_url}{path}?"
                                   f"{urlencode({'expires': expires, 'signature': signature})}"))


class AaiRedactedAudioFileHandler(_AaiJobs):
    """``GET /v2/transcript/{id}/redacted-audio.mp3|wav``: the file, to the key's holder or
    to a URL signed by :class:`AaiRedactedAudioHandler`."""

    QUERY = {"GET": ("expires", "signature")}

    async def get(self, transcript_id: str, fmt: str) -> None:
        expires = self.get_query_argument("expires", None)
        signature = self.get_query_argument("signature", None)
        if expires is None and signature is None:
            who = await self.authenticate()
            await self.jobs.get(who.account.id, transcript_id)  # raises for another account's
        elif not url_signature_matches(upload_signing_key(self.ctx.settings), "GET",
                                       self.request.path, expires or "", signature or ""):
            raise UploadUrlInvalid("The redacted audio URL's signature does not match.",
                                   param="signature")
        elif int(expires or 0) < time.time():
            raise UploadUrlInvalid("The redacted audio URL has expired; get a new one from "
                                   f"/v2/transcript/{transcript_id}/redacted-audio.",
                                   param="expires")
        try:
            async with self.ctx.objects.local_copy(JobFiles(transcript_id).redacted_audio) as f:
                self.set_header("Content-Type", _AUDIO_TYPES[fmt])
                self.set_header("Content-Disposition",
                                f'attachment; filename="{transcript_id}.{fmt}"')
                with f.open("rb") as fh:
                    while chunk := fh.read(1 << 16):
                        self.write(chunk)
                        await self.flush()
        except ObjectMissing as exc:
            raise NotFound(f"Transcript {transcript_id!r} has no redacted audio.") from exc
        self.finish()


def aai_routes(ctx: Context) -> list[tuple[str, type, dict[str, Any]]]:
    """The ``/v2`` routes; served beside ``/v1`` but not part of its OpenAPI document."""
    jobs = {"ctx": ctx, "jobs": JobService(ctx)}
    return [
        (r"/v2/upload", AaiUploadHandler, {"ctx": ctx}),
        (r"/v2/transcript", AaiTranscriptsHandler, jobs),
        (r"/v2/transcript/([^/]+)", AaiTranscriptHandler, jobs),
        (r"/v2/transcript/([^/]+)/(srt|vtt)", AaiSubtitlesHandler, jobs),
        (r"/v2/transcript/([^/]+)/redacted-audio", AaiRedactedAudioHandler, jobs),
        (r"/v2/transcript/([^/]+)/redacted-audio\.(mp3|wav)", AaiRedactedAudioFileHandler, jobs),
        (r"/v2/transcript/[^/]+/.+", AaiNotFoundHandler, {"ctx": ctx}),
    ]
