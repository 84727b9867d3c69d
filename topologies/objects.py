"""The object-store layout: every key a component writes or reads, declared once.

Bytes stay out of Kafka and ClickHouse; records carry keys. Everything of one job
lives under ``jobs/<transcript_id>/`` so it goes with one ``delete_prefix``; uploads
live under ``uploads/<file_id>`` until the job that used them ends. Code builds keys
only through :class:`JobFiles` and :func:`upload_key`, and graph nodes name the
:class:`ObjectKey` declarations they read and write, so an edge between stages that
no topic shows (diarize reads the speech regions chunk wrote) is visible in
``a5s topology``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ObjectKey", "JobFiles", "upload_key", "file_id_of", "transcript_id_of",
           "JOBS_PREFIX", "UPLOADS_PREFIX", "OBJECT_KEYS", "PROCESSING_KEYS", "UPLOAD", "SPEC",
           "AUDIO", "DURATION", "SPEECH", "CHUNKS", "WORDS", "RESULT", "CHANNEL_AUDIO",
           "CHANNEL_SPEECH", "CHANNELS", "REDACTED_AUDIO"]

JOBS_PREFIX = "jobs/"
UPLOADS_PREFIX = "uploads/"


@dataclass(frozen=True)
class ObjectKey:
    """One kind of object: ``pattern`` shows its key, ``<...>`` parts vary per job."""

    pattern: str
    description: str


UPLOAD = ObjectKey("uploads/<file_id>", "an uploaded audio file, until its job ends or it expires")
SPEC = ObjectKey("jobs/<id>/spec.json", "what the job is (JobSpec); kept past the job while its "
                 "webhook is pending")
AUDIO = ObjectKey("jobs/<id>/audio.pcm", "the decoded audio, 16 kHz mono s16le")
DURATION = ObjectKey("jobs/<id>/duration.json", "the decoded audio's duration in seconds")
SPEECH = ObjectKey("jobs/<id>/speech.json", "VAD speech regions (diarization reads them)")
CHUNKS = ObjectKey("jobs/<id>/chunks.json", "speech regions merged into recognition chunks")
WORDS = ObjectKey("jobs/<id>/words.json", "recognised words with times")
RESULT = ObjectKey("jobs/<id>/result.json", "the assembled TranscriptResult")
CHANNEL_AUDIO = ObjectKey("jobs/<id>/audio-<n>.pcm", "a multichannel job's channel n (1-based), "
                          "decoded on its own, 16 kHz mono s16le; such a job has no audio.pcm")
CHANNEL_SPEECH = ObjectKey("jobs/<id>/speech-<n>.json", "VAD speech regions of a multichannel "
                           "job's channel n (bound its utterances and speaking time)")
CHANNELS = ObjectKey("jobs/<id>/channels.json", "how many channels a multichannel job decoded")
REDACTED_AUDIO = ObjectKey("jobs/<id>/redacted-audio", "the audio with its PII beeped or "
                           "silenced (redact_pii_audio), 16 kHz mono MP3 or WAV; kept as long "
                           "as the transcript")

OBJECT_KEYS: tuple[ObjectKey, ...] = (UPLOAD, SPEC, AUDIO, DURATION, SPEECH, CHUNKS, WORDS, RESULT,
                                      CHANNEL_AUDIO, CHANNEL_SPEECH, CHANNELS, REDACTED_AUDIO)
PROCESSING_KEYS: tuple[ObjectKey, ...] = tuple(k for k in OBJECT_KEYS if k != REDACTED_AUDIO)
"""What a job's end deletes: everything but what the transcript keeps."""


@dataclass(frozen=True)
class JobFiles:
    """The object keys of one job: ``JobFiles(tid).audio`` is ``jobs/<tid>/audio.pcm``."""

    transcript_id: str

    @property
    def prefix(self) -> str:
        return f"{JOBS_PREFIX}{self.transcript_id}/"

    def _key(self, decl: ObjectKey) -> str:
        return self.prefix + decl.pattern.rsplit("/", 1)[1]

    @property
    def spec(self) -> str:
        return self._key(SPEC)

    @property
    def audio(self) -> str:
        return self._key(AUDIO)

    @property
    def duration(self) -> str:
        return self._key(DURATION)

    @property
    def speech(self) -> str:
        return self._key(SPEECH)

    @property
    def chunks(self) -> str:
        return self._key(CHUNKS)

    @property
    def words(self) -> str:
        return self._key(WORDS)

    @property
    def result(self) -> str:
        return self._key(RESULT)

    @property
    def channels(self) -> str:
        return self._key(CHANNELS)

    def channel_audio(self, n: int | None) -> str:
        """Channel ``n``'s audio of a multichannel job; None: the job's mixed-down audio."""
        return self.audio if n is None else self._key(CHANNEL_AUDIO).replace("<n>", str(n))

    def channel_speech(self, n: int) -> str:
        return self._key(CHANNEL_SPEECH).replace("<n>", str(n))

    @property
    def redacted_audio(self) -> str:
        return self._key(REDACTED_AUDIO)

    def is_kept(self, key: str) -> bool:
        """An object the finished transcript keeps (deleted with it, not at the job's end)."""
        return key == self.redacted_audio

    def is_spec(self, key: str) -> bool:
        return key == self.spec


def upload_key(file_id: str) -> str:
    return UPLOADS_PREFIX + file_id


def file_id_of(key: str) -> str:
    """The file id of an ``uploads/<file_id>`` key."""
    return key.removeprefix(UPLOADS_PREFIX)


def transcript_id_of(key: str) -> str | None:
    """The transcript id of a ``jobs/<id>/<name>`` key, None for any other key."""
    parts = key.split("/")
    if len(parts) >= 3 and key.startswith(JOBS_PREFIX):
        return parts[1]
    return None
