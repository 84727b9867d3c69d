"""Records that travel on the topics declared in ``topologies``.

Records stay small: audio, job specs and results travel by object-store key.
Secrets (the webhook auth header value) never go on a topic; they live in Redis
until delivery ends.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .api import Speaker, Timestamp, Utterance, Word
from .word_forms import word_form

__all__ = [
    "Record", "AccountLimits", "PiiPolicy", "PiiRedaction", "MAX_SPEAKERS", "SpeakerCount",
    "JobSpec", "Channels", "Submitted", "Canceled", "DurationKnown", "Finished",
    "LimitsChanged", "SessionOpened", "SessionClosed", "SessionLost", "AccountEvent", "Dispatch",
    "Admission",
    "Chunk", "ChunkPlan", "Transcribed", "JobOutcome", "Settled", "WebhookDue", "CompletedTranscript",
    "ResultWord", "ResultUtterance", "TranscriptResult", "OpenSegment", "ResumePoint",
    "RealtimeCheckpoint", "RealtimeAudio", "RealtimeMessage",
]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AccountLimits(Record):
    """The limits the accounts agent enforces, as set in the console."""

    usage_limit_seconds: float
    max_concurrent_jobs: int = 5
    max_queued_jobs: int = 2000
    max_audio_duration_seconds: int = 36000


PiiPolicy = Literal["credit_card_number", "phone_number", "email_address",
                   "us_social_security_number", "number_sequence"]
"""The kinds of PII a job can redact (AssemblyAI's policy names; ``pipeline.redaction``)."""


class PiiRedaction(Record):
    """What a job redacts before its words are stored (``/v2``'s ``redact_pii``)."""

    policies: list[PiiPolicy] = Field(min_length=1)
    substitution: Literal["hash", "entity_name"] = "hash"
    """A redacted word becomes ``#`` for each character, or ``[POLICY_NAME]``."""
    audio: bool = False
    """Also write the audio with the redacted words beeped or silenced."""
    audio_method: Literal["beep", "silence"] = "beep"
    audio_format: Literal["mp3", "wav"] = "mp3"


MAX_SPEAKERS = 20
"""The most speakers a job may ask diarization for, as an exact count or as a bound."""


class SpeakerCount(Record):
    """How many speakers diarization may find: the number it estimates, clipped into
    [``at_least``, ``at_most``]; equal bounds are an exact count."""

    at_least: int = Field(1, ge=1, le=MAX_SPEAKERS)
    at_most: int | None = Field(None, ge=1, le=MAX_SPEAKERS)
    """None: no bound but the estimate."""

    @model_validator(mode="after")
    def _ordered(self) -> "SpeakerCount":
        if self.at_most is not None and self.at_least > self.at_most:
            raise ValueError(f"at least {self.at_least} speakers is more than at most "
                             f"{self.at_most}")
        return self

    @classmethod
    def exactly(cls, speakers: int) -> "SpeakerCount":
        return cls(at_least=speakers, at_most=speakers)

    @property
    def exact(self) -> int | None:
        """The count, when the bounds leave only one."""
        return self.at_least if self.at_least == self.at_most else None

    def clip(self, estimate: int) -> int:
        """``estimate`` moved into the bounds."""
        return max(self.at_least, estimate if self.at_most is None else
                   min(self.at_most, estimate))


class JobSpec(Record):
    """What a job is, written once by the gateway to the object store (``jobs/<id>/spec.json``)."""

    transcript_id: str
    account_id: str
    key_id: str
    created_at: Timestamp
    audio_url: str | None = None
    file_id: str | None = None
    language_code: str = "en"
    webhook_url: str | None = None
    webhook_auth_header_name: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    webhook_format: Literal["a5s", "assemblyai"] = "a5s"
    """The webhook body: the spec's event, or AssemblyAI's for jobs created under ``/v2``."""
    speakers_expected: int | None = Field(None, ge=1, le=MAX_SPEAKERS)
    """The number of speakers the client expects (``/v2``); None: diarization estimates it."""
    min_speakers_expected: int | None = Field(None, ge=1, le=MAX_SPEAKERS)
    max_speakers_expected: int | None = Field(None, ge=1, le=MAX_SPEAKERS)
    """Bounds on the number diarization estimates (``/v2``'s ``speaker_options``); not with
    ``speakers_expected``."""
    diarize: bool = True
    """Whether a speaker model runs (``/v2``'s ``speaker_labels``; always on ``/v1``). False:
    a job mixed down to one audio is completed by transcribe with one speaker, and the
    diarize stage never sees it; a multichannel job's speakers are its channels."""
    multichannel: bool = False
    """Each channel transcribed on its own, the speaker being the channel (``/v2``'s
    ``multichannel``); false: the channels are mixed down to one."""
    redaction: PiiRedaction | None = None
    """PII to redact from the words (and audio) before anything stores them (``/v2``)."""
    vocabulary: list[tuple[str, int]] | None = None
    """Key terms for the recogniser (``/v2`` ``keyterms_prompt`` or ``word_boost``), as
    ``(term, strength 0-12)``, the live sessions' custom vocabulary; None: none."""

    @model_validator(mode="after")
    def _one_speaker_hint(self) -> "JobSpec":
        if self.speakers_expected is not None and (self.min_speakers_expected is not None
                                                   or self.max_speakers_expected is not None):
            raise ValueError("an exact speaker count and speaker bounds exclude each other")
        self.speaker_count()
        return self

    def speaker_count(self) -> SpeakerCount:
        """The bounds diarization keeps to."""
        if self.speakers_expected is not None:
            return SpeakerCount.exactly(self.speakers_expected)
        return SpeakerCount(at_least=self.min_speakers_expected or 1,
                            at_most=self.max_speakers_expected)

    @property
    def assembled_by_transcribe(self) -> bool:
        """A job with no speaker stage: not diarized and mixed down to one audio."""
        return not self.diarize and not self.multichannel


Channels = Annotated[int | None, Field(ge=1)]
"""The channels of a multichannel job, each decoded, recognised and billed on its own;
None: a job whose channels are mixed down to one audio."""


# --- account events [key: account_id] -> accounts agent -------------------------------------

class Submitted(Record):
    kind: Literal["submitted"] = "submitted"
    account_id: str
    transcript_id: str
    at: Timestamp
    limits: AccountLimits


class Canceled(Record):
    kind: Literal["canceled"] = "canceled"
    account_id: str
    transcript_id: str
    at: Timestamp


class DurationKnown(Record):
    kind: Literal["duration_known"] = "duration_known"
    account_id: str
    transcript_id: str
    duration: float
    channels: Channels = None


class _Outcome(Record):
    account_id: str
    transcript_id: str
    status: Literal["completed", "error"]
    duration: float | None = None
    error_code: str | None = None
    error_message: str | None = None
    channels: Channels = None


class Finished(_Outcome):
    """The job's result is stored; the accounts agent counts it, then settles it."""

    kind: Literal["finished"] = "finished"


class LimitsChanged(Record):
    kind: Literal["limits_changed"] = "limits_changed"
    account_id: str
    limits: AccountLimits


class SessionOpened(Record):
    kind: Literal["session_opened"] = "session_opened"
    account_id: str
    session_id: str
    at: Timestamp
    limit_ms: int = 0
    """The audio the session may bill (its ``ready``'s ``session_limit_ms``): the accounts
    agent holds it as reserved usage until the session closes. 0 (records from before this
    field): nothing held."""


class SessionClosed(Record):
    kind: Literal["session_closed"] = "session_closed"
    account_id: str
    session_id: str
    key_id: str
    audio_ms: int
    billed_ms: int
    at: Timestamp


class SessionLost(Record):
    """A held live session whose lease is gone without a close: its gateway died. The
    accounts agent frees the hold; a late ``SessionClosed`` still counts its usage."""

    kind: Literal["session_lost"] = "session_lost"
    account_id: str
    session_id: str
    at: Timestamp


AccountEvent = Annotated[
    Submitted | Canceled | DurationKnown | Finished | LimitsChanged | SessionOpened
    | SessionClosed | SessionLost,
    Field(discriminator="kind"),
]


# --- batch stages [key: transcript_id] --------------------------------------------------------

class Dispatch(Record):
    """A queued job got a processing slot: decode it."""

    account_id: str
    transcript_id: str
    started_at: Timestamp


class Admission(Record):
    """The accounts agent's verdict once the duration is known."""

    account_id: str
    transcript_id: str
    admitted: bool
    duration: float
    reason: str = ""
    channels: Channels = None


class Chunk(Record):
    start: float
    end: float
    channel: int | None = Field(None, ge=1)
    """The channel (1-based) of a multichannel job; None: the job's mixed-down audio."""


class ChunkPlan(Record):
    account_id: str
    transcript_id: str
    duration: float
    chunks: list[Chunk]
    channels: Channels = None


class Transcribed(Record):
    account_id: str
    transcript_id: str
    duration: float
    result_key: str
    channels: Channels = None


class JobOutcome(_Outcome):
    """The end of a job's processing, successful or not: finalize takes it from here."""

    result_key: str | None = None


class Settled(_Outcome):
    """Usage is counted and the slot released: the outcome may now be made visible."""


class WebhookDue(Record):
    transcript_id: str
    account_id: str
    webhook_id: str
    attempt: int = 0
    not_before: datetime | None = None


class ResultWord(Word):
    """A word of a stored result: the ``/v1`` word, and the form the recogniser wrote.

    A ``/v1`` word is taken as one (without a written form)."""

    model_config = ConfigDict(extra="forbid", from_attributes=True)

    text_formatted: str | None = None
    """The word cased and punctuated as the recogniser wrote it (``"Hello,"``); not part of
    the ``/v1`` word. None for results stored before it was kept and for recognisers that
    write no such form (the transducers): readers fall back to ``text``
    (``schemas.word_forms``)."""


class ResultUtterance(Utterance):
    model_config = ConfigDict(extra="forbid", from_attributes=True)

    words: list[ResultWord]


_WRITTEN = {"__all__": {"text_formatted"}}


class TranscriptResult(BaseModel):
    """The result fields of a completed transcript, as stored and served."""

    text: str = ""
    speakers: list[Speaker] = Field(default_factory=list)
    utterances: list[ResultUtterance] = Field(default_factory=list)
    words: list[ResultWord] = Field(default_factory=list)
    word_confidence: list[float] = Field(default_factory=list)
    """The recogniser's probability of each of ``words`` (same order), 0 to 1. Not part of
    the ``/v1`` transcript; ``/v2`` serves it as AssemblyAI's word ``confidence``. Empty for
    results stored before it was kept."""
    audio_channels: int | None = None
    """The channels of a multichannel job (``/v2``'s ``audio_channels``); its speaker
    ``speaker_<n>`` is channel ``n``. None: the channels were mixed down and diarized.
    Not part of the ``/v1`` transcript."""

    def public(self) -> dict[str, Any]:
        """The fields a ``/v1`` transcript and the ``transcripts.completed`` record carry:
        verbatim words only."""
        return self.model_dump(exclude={"word_confidence": True, "audio_channels": True,
                                        "words": _WRITTEN,
                                        "utterances": {"__all__": {"words": _WRITTEN}}})

    def in_form(self, punctuate: bool, format_text: bool) -> TranscriptResult:
        """The result with every word in the form the switches ask for
        (``schemas.word_forms``), and the utterances' and transcript's text joined from
        those words. Times, speakers and confidences are unchanged."""
        if not (punctuate or format_text):
            return self

        def shown(words: list[ResultWord]) -> list[ResultWord]:
            return [w.model_copy(update={"text": word_form(w.text, w.text_formatted,
                                                           punctuate, format_text)})
                    for w in words]

        words = shown(self.words)
        utterances = []
        for u in self.utterances:
            uw = shown(u.words)
            utterances.append(u.model_copy(update={
                "words": uw, "text": " ".join(w.text for w in uw) if uw else u.text}))
        return self.model_copy(update={
            "words": words, "utterances": utterances,
            "text": " ".join(w.text for w in words) if words else self.text})


class CompletedTranscript(Record):
    """Public record on ``transcripts.completed`` for data engineers (documented in the README)."""

    id: str
    account_id: str
    status: Literal["completed", "error"]
    created_at: Timestamp
    completed_at: Timestamp
    audio_duration: float | None
    language_code: str
    model: str
    metadata: dict[str, Any]
    text: str | None = None
    words: list[Word] | None = None
    utterances: list[Utterance] | None = None
    speakers: list[Speaker] | None = None
    error_code: str | None = None


# --- realtime [key: session_id] ---------------------------------------------------------------

class OpenSegment(Record):
    """The endpointing state of a live session's open segment."""

    index: int
    start: int
    opened_at: int
    speech: int
    temp_end: int
    probs: list[tuple[int, float]]
    """Recent VAD windows: (end sample, speech probability)."""


class ResumePoint(Record):
    """What a live session's recognizer needs to go on without its earlier audio: taken
    when every closed segment is settled. Samples are absolute indices of the stream.

    The VAD's own state goes with it, so a recognizer rebuilt from it judges the audio
    after ``judged`` exactly as the one it replaces would have.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_bytes="base64",
                              val_json_bytes="base64")
    start: int
    """First sample of the audio it needs: the open segment's start, or the preroll."""
    judged: int
    """Samples the VAD has judged; the audio after it goes through the VAD again."""
    settle: int
    """Index of the next segment to settle."""
    last_end: int
    settled: list[str]
    """The settled texts, in order."""
    vad: bytes
    """The VAD's recurrent state and context at ``judged``."""
    open: OpenSegment | None = None


class RealtimeCheckpoint(Record):
    """Where a live session can be rebuilt from without its earlier audio.

    The worker holding the session writes it into the session's own audio log; from then
    on it keeps the log only from the audio record it names (the record's ``seq``), and a
    worker taking the session over replays from there instead of from the session's start.
    """

    skip: int
    """Samples of the named record's audio before ``point.start``."""
    point: ResumePoint
    vocabulary: list[tuple[str, int]] | None = None


class RealtimeAudio(Record):
    """A stretch of a live session's audio (16 kHz s16le ``pcm``, base64 in JSON).

    ``seq`` 0 opens the session (``vocabulary``, no audio); ``final`` ends it. ``origin``
    (on every record after the opening one) is the offset of the session's first opening
    record: a worker that takes the session over replays its audio from there, or from
    the latest ``checkpoint`` (a record the worker writes, naming the audio record ``seq``
    to go on from; it carries no audio and is not part of the live stream).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_bytes="base64",
                              val_json_bytes="base64")
    session_id: str
    seq: int
    gateway_id: str
    pcm: bytes = b""
    final: bool = False
    vocabulary: list[tuple[str, int]] | None = None
    origin: int | None = None
    checkpoint: RealtimeCheckpoint | None = None


class RealtimeMessage(Record):
    """From the realtime worker to the owning gateway.

    ``seq`` is the last audio record of the session the worker has received, so every
    message is also a progress report. ``progress`` says only that (sent at least once a
    second while audio flows, and once when the session opens); ``finished`` follows the
    last transcript after the ``final`` audio record; ``provider_error`` ends the session.
    """

    session_id: str
    seq: int
    type: Literal["transcript", "progress", "finished", "provider_error"]
    text: str = ""
    is_final: bool = False
    replaying: bool = False
    """Sent by a worker that took the session over and is rebuilding it from its audio."""
    start: float | None = None
    """A transcript's segment start, s of the stream."""
    end: float | None = None
    """A final's speech end (its segment's end less the end padding); a partial's audio
    covered, s of the stream. Read by ``/v3/ws`` for its turns' silence and word times."""
