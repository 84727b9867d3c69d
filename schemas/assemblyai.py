"""AssemblyAI's batch shapes (``/v2``), as the official ``assemblyai`` SDK 1.8 reads and writes them.

These models are the compatibility contract of ``gateway/assemblyai_compat.py``: the create
body the SDK sends, the transcript and list it parses, the upload answer, the error body
(``{"error": "..."}``, which the SDK reads by key) and the webhook body. Times are
milliseconds, speakers are letters. ``docs/compat.md`` says for each field whether a5s
supports, maps or refuses it. With ``multichannel`` the speaker of a word and an utterance
is its channel, ``"1"``, ``"2"``, ..., as AssemblyAI labels them, and both carry ``channel``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr,
                      field_validator, model_validator)

from .records import MAX_SPEAKERS

__all__ = ["AaiCreateTranscript", "AaiSpeakerOptions", "AaiWord", "AaiUtterance", "AaiTranscript",
           "AaiTranscriptItem",
           "AaiPageDetails", "AaiTranscriptList", "AaiUpload", "AaiError", "AaiWebhook",
           "AaiRedactedAudio", "AaiRedactedAudioPending", "REFUSED", "PII_POLICIES_REFUSED",
           "SPEECH_MODEL_USED", "is_off", "KEYTERMS_MAX", "KEYTERM_MAX_CHARS",
           "KEYTERM_MAX_WORDS", "KEYTERMS_MAX_CHARS", "BOOST_STRENGTH", "KEYTERMS_STRENGTH"]

SPEECH_MODEL_USED = "a5s-async-v1"

KEYTERMS_MAX = 100
"""Key terms a job takes (``keyterms_prompt`` or ``word_boost``), at most."""
KEYTERM_MAX_CHARS = 100
KEYTERM_MAX_WORDS = 6
"""A term's length, characters and words (AssemblyAI's own word limit)."""
KEYTERMS_MAX_CHARS = 1000
"""All the terms together, characters: Whisper's prompt holds about 220 tokens."""
BOOST_STRENGTH = {"low": 3, "default": 6, "high": 9}
"""``boost_param`` as the custom-vocabulary strength of live sessions (0-12)."""
KEYTERMS_STRENGTH = 6
"""The strength of a ``keyterms_prompt`` term."""

_NO_EXTRAS = "a5s does not run AssemblyAI's audio intelligence models"
REFUSED: dict[str, str] = {
    # transcription options a5s has no counterpart for
    "dual_channel": "deprecated by AssemblyAI for multichannel; send multichannel instead",
    "audio_channels": "a response field, not an option",
    "audio_start_from": "a5s transcribes the whole file; trim the audio before upload",
    "audio_end_at": "a5s transcribes the whole file; trim the audio before upload",
    "custom_spelling": "a5s has no custom spelling; map words after the transcript",
    "keyterms_prompt_options": "a5s takes key terms as keyterms_prompt alone",
    "prompt": "a5s does not take a free-text prompt; give key terms in keyterms_prompt",
    "temperature": "a5s decodes with fixed settings",
    "disfluencies": "a5s transcripts are verbatim as the model hears them; fillers are not "
                    "added back",
    "filter_profanity": "a5s does not filter words",
    "remove_audio_tags": "a5s transcripts carry no audio tags",
    "speech_threshold": "a5s has no speech-fraction gate",
    "speech_model": f"a5s serves one batch model ({SPEECH_MODEL_USED}); leave speech_model unset",
    "speech_models": f"a5s serves one batch model ({SPEECH_MODEL_USED}); leave speech_models "
                     "unset",
    "domain": f"a5s serves one batch model ({SPEECH_MODEL_USED}) for every domain",
    "language_detection": "a5s transcribes English only; there is nothing to detect",
    "language_detection_options": "a5s transcribes English only; there is nothing to detect",
    "language_confidence_threshold": "a5s transcribes English only; there is nothing to detect",
    "language_confidence": "a5s transcribes English only; there is nothing to detect",
    "language_detection_results": "a response field, not an option",
    "language_codes": "a5s transcribes English only; give language_code en or leave it unset",
    "redact_pii_return_unredacted": "a5s never stores the words as spoken once they are "
                                    "redacted, so it cannot return them",
    # audio intelligence
    "content_safety": _NO_EXTRAS + " (content safety)",
    "content_safety_confidence": _NO_EXTRAS + " (content safety)",
    "iab_categories": _NO_EXTRAS + " (topic detection)",
    "sentiment_analysis": _NO_EXTRAS + " (sentiment analysis)",
    "auto_chapters": _NO_EXTRAS + " (auto chapters)",
    "entity_detection": _NO_EXTRAS + " (entity detection)",
    "summarization": _NO_EXTRAS + " (summarization)",
    "summary_model": _NO_EXTRAS + " (summarization)",
    "summary_type": _NO_EXTRAS + " (summarization)",
    "auto_highlights": _NO_EXTRAS + " (key phrases)",
    "speech_understanding": _NO_EXTRAS + " (speech understanding, translation)",
}
"""AssemblyAI request fields a5s refuses when they ask for something (any value but an
empty one: ``null``, ``false``, ``[]``, ``{}``), and why."""

_NO_DETECTOR = ("a5s detects credit_card_number, phone_number, email_address, "
                "us_social_security_number and number_sequence only")
PII_POLICIES_REFUSED: dict[str, str] = {
    "person_name": "a5s has no named-entity model to find names (none that installs offline "
                   "from a package also works on lowercase transcripts without punctuation)",
    **{name: _NO_DETECTOR for name in (
        "account_number", "banking_information", "blood_type", "credit_card_cvv",
        "credit_card_expiration", "date", "date_interval", "date_of_birth", "drivers_license",
        "drug", "duration", "event", "filename", "gender", "gender_sexuality",
        "healthcare_number", "injury", "ip_address", "language", "location",
        "location_address", "location_address_street", "location_city",
        "location_coordinate", "location_country", "location_state", "location_zip",
        "marital_status", "medical_condition", "medical_process", "money_amount",
        "nationality", "occupation", "organization", "organization_medical_facility",
        "passport_number", "password", "person_age", "physical_attribute",
        "political_affiliation", "religion", "sexuality", "statistics", "time", "url",
        "username", "vehicle_id", "zodiac_sign", "corporate_action", "day", "effect",
        "financial_metric", "medical_code", "month", "organization_id", "product", "project",
        "trend", "year")},
}
"""AssemblyAI's PII policies a5s refuses, and why; the ones it redacts are
``schemas.records.PiiPolicy``."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AaiSpeakerOptions(_Model):
    """``speaker_options``: bounds on the number of speakers diarization estimates. The SDK's
    tuning fields of AssemblyAI's own clusterer are taken only unset."""

    model_config = ConfigDict(extra="allow")

    min_speakers_expected: StrictInt | None = Field(None, ge=1, le=MAX_SPEAKERS)
    max_speakers_expected: StrictInt | None = Field(None, ge=1, le=MAX_SPEAKERS)

    @model_validator(mode="after")
    def _ordered(self) -> "AaiSpeakerOptions":
        low, high = self.min_speakers_expected, self.max_speakers_expected
        if low is not None and high is not None and low > high:
            raise ValueError(f"min_speakers_expected ({low}) is more than "
                             f"max_speakers_expected ({high})")
        return self

    def asks(self) -> bool:
        """Whether any bound is given (``{}`` asks for nothing)."""
        return self.min_speakers_expected is not None or self.max_speakers_expected is not None


class AaiCreateTranscript(BaseModel):
    """``POST /v2/transcript``: the fields a5s acts on. Every other field is kept in
    ``model_extra`` for the gateway to refuse with the reason from :data:`REFUSED`."""

    model_config = ConfigDict(extra="allow")

    audio_url: StrictStr
    language_code: StrictStr | None = None
    punctuate: StrictBool | None = None
    format_text: StrictBool | None = None
    speaker_labels: StrictBool | None = None
    speakers_expected: StrictInt | None = Field(None, ge=1, le=MAX_SPEAKERS)
    speaker_options: AaiSpeakerOptions | None = None
    multichannel: StrictBool | None = None
    keyterms_prompt: list[StrictStr] | None = None
    word_boost: list[StrictStr] | None = None
    boost_param: Literal["low", "default", "high"] | None = None
    webhook_url: StrictStr | None = None
    webhook_auth_header_name: StrictStr | None = None
    webhook_auth_header_value: StrictStr | None = None
    redact_pii: StrictBool | None = None
    redact_pii_policies: list[StrictStr] | None = None
    redact_pii_sub: StrictStr | None = None
    redact_pii_audio: StrictBool | None = None
    redact_pii_audio_quality: StrictStr | None = None
    redact_pii_audio_options: dict[str, Any] | None = None

    @field_validator("speaker_options", mode="before")
    @classmethod
    def _an_object(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, dict):
            raise ValueError("an object with min_speakers_expected and max_speakers_expected "
                             "is expected")
        return value


class AaiWord(_Model):
    text: str
    start: int
    end: int
    confidence: float
    speaker: str | None = None
    channel: str | None = None
    """A multichannel transcript's channel, ``"1"`` for the first."""


class AaiUtterance(AaiWord):
    words: list[AaiWord]


class AaiTranscript(_Model):
    """A transcript as ``GET /v2/transcript/{id}`` answers it."""

    id: str
    status: Literal["queued", "processing", "completed", "error"]
    audio_url: str
    language_code: str = "en"
    punctuate: bool | None = None
    format_text: bool | None = None
    speaker_labels: bool | None = None
    speakers_expected: int | None = None
    speaker_options: AaiSpeakerOptions | None = None
    multichannel: bool | None = None
    audio_channels: int | None = None
    keyterms_prompt: list[str] | None = None
    word_boost: list[str] | None = None
    boost_param: str | None = None
    webhook_url: str | None = None
    webhook_auth: bool = False
    webhook_auth_header_name: str | None = None
    webhook_status_code: int | None = None
    speech_model: None = None
    speech_model_used: str = SPEECH_MODEL_USED
    redact_pii: bool = False
    redact_pii_policies: list[str] | None = None
    redact_pii_sub: str | None = None
    redact_pii_audio: bool | None = None
    redact_pii_audio_quality: str | None = None
    text: str | None = None
    words: list[AaiWord] | None = None
    utterances: list[AaiUtterance] | None = None
    confidence: float | None = None
    audio_duration: int | None = None
    error: str | None = None


class AaiTranscriptItem(_Model):
    id: str
    resource_url: str
    status: Literal["queued", "processing", "completed", "error"]
    created: str
    completed: str | None = None
    audio_url: str
    error: str | None = None


class AaiPageDetails(_Model):
    limit: int
    result_count: int
    current_url: str
    prev_url: str | None = None
    next_url: str | None = None


class AaiTranscriptList(_Model):
    page_details: AaiPageDetails
    transcripts: list[AaiTranscriptItem]


class AaiUpload(_Model):
    upload_url: str


class AaiError(_Model):
    """The error body: the SDK reads ``error`` and shows it after its own message."""

    error: str


class AaiRedactedAudio(_Model):
    """``GET /v2/transcript/{id}/redacted-audio`` once the transcript is completed."""

    status: Literal["redacted_audio_ready"] = "redacted_audio_ready"
    redacted_audio_url: str


class AaiRedactedAudioPending(_Model):
    """The same route, answered ``202`` while the job runs (the SDK polls again)."""

    status: Literal["queued", "processing"]


class AaiWebhook(_Model):
    """What AssemblyAI posts when a transcript is done; the client then GETs the transcript."""

    transcript_id: str
    status: Literal["completed", "error"]


def is_off(value: Any) -> bool:
    """Whether a refused option's value asks for nothing (so it may be sent and ignored)."""
    return value is None or value is False or value == [] or value == {}

