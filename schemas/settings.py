"""Configuration: one frozen ``Settings`` read once by each entry point.

Sources, highest first: keyword arguments, ``A5S_*`` environment variables, the
TOML file named by ``A5S_CONFIG`` (default ``a5s.toml`` in the working
directory, if present), then the defaults below. Nested names use ``__`` in the
environment, e.g. ``A5S_LIMITS__USAGE_LIMIT_SECONDS``.

An empty ``kafka_bootstrap`` / ``clickhouse_url`` / ``redis_url`` means "use the
embedded service that ``a5s up`` starts under ``data_dir``".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError
from pydantic_settings import (BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict,
                               TomlConfigSettingsSource)

from security.addresses import AddressPolicy, UnsafeURL, check_url

__all__ = ["Settings", "DefaultLimits", "EmbeddedPorts", "WebhookSettings", "ModelSettings",
           "RealtimeSettings", "SettingsError", "load_settings"]


class DefaultLimits(BaseModel):
    """Limits given to new accounts (spec section 8); the console can change them per account."""

    model_config = {"frozen": True}
    usage_limit_seconds: float = 5 * 3600
    max_concurrent_jobs: int = 5
    max_queued_jobs: int = 2000
    max_requests_per_minute: int = 600
    max_audio_duration_seconds: int = 10 * 3600
    retention_days: int = 30
    max_concurrent_sessions: int = 5
    max_session_seconds: int = 300


class EmbeddedPorts(BaseModel):
    """Loopback ports of the services ``a5s up`` starts."""

    model_config = {"frozen": True}
    kafka: int = 19092
    redis: int = 16379


class WebhookSettings(BaseModel):
    model_config = {"frozen": True}
    retry_schedule_s: tuple[float, ...] = (30, 120, 600, 1800, 3600, 7200, 14400, 28800, 28800)
    timeout_s: float = 15.0
    allow_private: bool = True
    """Self-hosted receivers often sit on private networks; loopback stays refused."""
    allow_loopback: bool = False

    def address_policy(self) -> AddressPolicy:
        """Where deliveries may go: public addresses always; private networks when
        ``allow_private``; loopback only when ``allow_loopback``; link-local, metadata,
        multicast and reserved ranges never."""
        return AddressPolicy(allow_private=self.allow_private,
                             allow_loopback=self.allow_loopback)

    def undeliverable(self, url: str) -> str | None:
        """Why no delivery to ``url`` could ever be made under these settings, naming the
        setting that would allow it; None when one may be (a host name is judged by its
        form only: where it resolves is known only when a delivery connects)."""
        try:
            check_url(url, self.address_policy())
            return None
        except UnsafeURL as exc:
            why = str(exc)
        for loopback, private in ((True, self.allow_private), (self.allow_loopback, True),
                                  (True, True)):
            try:
                check_url(url, AddressPolicy(allow_private=private, allow_loopback=loopback))
            except UnsafeURL:
                continue
            names = [n for n, on, was in (("A5S_WEBHOOKS__ALLOW_LOOPBACK", loopback,
                                           self.allow_loopback),
                                          ("A5S_WEBHOOKS__ALLOW_PRIVATE", private,
                                           self.allow_private)) if on and not was]
            return (f"{why}, and this server delivers webhooks there only with "
                    f"{' and '.join(n + '=true' for n in names)}")
        return f"{why}, and no setting allows webhooks there"


class ModelSettings(BaseModel):
    model_config = {"frozen": True}
    whisper: str = "base"
    """A CTranslate2 model directory, or a packaged alias: ``base`` or ``tiny.en``."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where batch ASR runs; ``auto``: ``cuda`` when CTranslate2 sees a CUDA device."""
    device_index: int = 0
    """Which GPU, when the device is ``cuda``."""
    compute_type: str = "auto"
    """CTranslate2 compute type; ``auto``: ``int8`` on CPU, ``float16`` on CUDA."""
    beam_size: int = 5
    fit_window: bool = True
    """Fit Whisper's encoder window to each chunk (plus 5 s of padding, at least 10 s)
    instead of padding it to 30 s: 1.7x the speed on the eval set's real speech, with the
    same WER within one word in a thousand (``python -m bench.asr [--full-window]``)."""
    timestamp_tokens: bool | None = None
    """Whisper writes timestamp tokens (faster-whisper's way); ``false`` prompts
    ``<|notimestamps|>`` and times the words by the alignment alone. ``None`` chooses by
    device: off on CUDA, where the beam search then costs a fraction per chunk in batches
    (base on an H100: RTF 0.0048 against 0.0198), on on CPU. Accuracy on the eval set, the
    same weights: WER 8.51% off against 8.65% on with base (``python -m bench.asr
    [--no-timestamp-tokens]``; docs/scaling.md)."""
    asr_workers: int = Field(0, ge=0)
    """Chunk decodes run at once, each on a model replica of its own (CTranslate2 workers);
    0 chooses by device: one per CPU core (at most 4) on CPU, 1 on CUDA. Measured on 2
    cores: two 1-thread decodes at once gave 1.6x the throughput of one 2-thread decode."""
    cpu_threads: int = Field(0, ge=0)
    """Threads per decode on CPU; 0: the CPU cores shared out among the ASR workers."""
    batch_size: int = Field(0, ge=0)
    """Chunks (from any jobs in flight) decoded in one call; 1 decodes one at a time;
    0 chooses by device: 16 on CUDA (4 with timestamp tokens, where larger beam-search
    batches cost more per chunk), 1 on CPU (where parallel workers beat batches); see
    docs/scaling.md for the measurements."""
    batch_max_wait_ms: float = Field(20.0, ge=0)
    """Latency budget: the longest a chunk waits for others to fill its batch, ms."""
    transcribe_concurrency: int = Field(4, ge=1)
    """Jobs one worker's transcribe stage works on at once (their chunks share batches)."""
    stage_workers: int = Field(0, ge=0)
    """Jobs the decode, chunk and diarize stages each work on at once, and the threads of
    the pool their model calls run on; 0: as many as the ASR workers. With one, those
    stages of every job queued on one thread: on 2 cores, while Whisper's replicas took
    both, diarization fell behind and finished alone on one core (docs/job-path.md)."""
    model_calls: int = Field(0, ge=0)
    """Batch model calls (Whisper's decodes and the stages' decode, VAD and diarization)
    that run at once across both pools; 0 chooses by device: on CPU the cores the ASR
    workers take (workers x threads), on CUDA no limit. The two pools hold twice that many
    threads, so that a core freed by one kind of call goes to the other; four model calls
    on two cores took about a tenth more CPU each than two (docs/job-path.md)."""
    streaming_partial: str = "tiny.en"
    streaming_final: str = "tiny.en"
    """``base`` (finals with the batch beam): 7.09% WER on the dev items against 7.77% for
    tiny.en with its beam of 3, at about twice the final-decode CPU per live session
    (docs/realtime.md)."""
    batch_engine: Literal["whisper", "zipformer"] = "whisper"
    """What serves ``a5s-async-v1``: the packaged Whisper, or an operator's icefall
    transducer in ``batch_model_dir`` (ONNX or TorchScript export; see docs/models.md)."""
    batch_model_dir: str = ""
    """The Zipformer export for batch jobs (needed when ``batch_engine`` is ``zipformer``)."""
    streaming_engine: Literal["whisper", "zipformer"] = "whisper"
    """What serves ``a5s-v2-streaming``: Whisper per VAD segment, or an operator's streaming
    icefall transducer in ``streaming_model_dir`` (ONNX, decoded chunk by chunk)."""
    streaming_model_dir: str = ""
    """The streaming Zipformer ONNX export (``export-onnx-streaming.py``)."""
    zipformer_decoding: Literal["greedy_search", "modified_beam_search"] = "greedy_search"
    """Search of the batch Zipformer (streaming always uses ``modified_beam_search``, which
    custom vocabulary needs)."""
    zipformer_beam: int = Field(4, ge=1, le=16)
    """Active paths of ``modified_beam_search``."""
    zipformer_truecase: bool = True
    """Restore casing of uppercase streaming Zipformer output with the ``truecase`` model
    (about 0.65 GB of memory and 7 s to load, once per worker)."""


class RealtimeSettings(BaseModel):
    """Live streaming (``WSS /v1/realtime``): protocol limits, timers and the audio path."""

    model_config = {"frozen": True}
    start_timeout_s: float = 45.0
    """The ``start`` message must arrive this soon after connecting (``invalid_start``)."""
    idle_timeout_s: float = 45.0
    """No client message for this long ends the session (``idle_timeout``)."""
    max_session_s: float = 300.0
    """Audio per session, s; an account's ``max_session_seconds`` may lower it."""
    max_frame_bytes: int = 64 * 1024
    max_message_bytes: int = 1 << 20
    """Larger frames close the connection without a message (the spec's 1 MB)."""
    burst_ms: int = 2000
    """Audio a client may send ahead of real time, ms."""
    allowed_origins: tuple[str, ...] = ()
    """Browser origins allowed besides the gateway's own (``*`` allows any); clients that
    send no ``Origin`` header (not browsers) are always allowed."""
    batch_ms: int = 20
    """The gateway forwards a session's audio in records of about this much audio, ms. The
    frame that completes a phrase's end padding waits for its record to fill: 10 ms on
    average with 40 ms records, none with 20 (a client's frame each). With the live
    consumers woken by their own process, 20 ms records took 12-15 ms off the 5-session
    final p50 for about one point of a core per session; before that wake-up, the extra
    records cost more than they saved (docs/realtime.md, "Audio records of 20 ms")."""
    early_pad_ms: int = Field(64, ge=0)
    """The worker's early speculative final decode, ms of the end padding it waits for (0:
    none; see ``VadOptions.early_pad_ms``), asked while a worker holds at most 5 sessions.
    With 40 ms records and partials at 15% of a decode thread, 5 sessions on 2 cores got a
    final p50 of 0.25-0.27 s against 0.33-0.35 s without it (docs/realtime.md, "Early
    finals")."""
    fetch_max_wait_ms: int = 100
    """Longest fetch wait of the realtime consumers (gateway and worker). A broker that
    answers a waiting fetch as soon as a record arrives (Apache Kafka) delivers in
    milliseconds whatever this is; it bounds the delay on one that does not. The embedded
    broker answers an empty fetch at once: there the consumers pause instead
    (``stores.kafka.pace_empty_fetches``, 10 ms for these while records flow, this between
    sessions; after 30 s without a record, 0.5 s unless a record produced in the same
    process wakes them). 10 ms here cost a fifth of a core per idle process in polling."""
    provider_start_timeout_s: float = 60.0
    """How long a new session waits for a worker to take it (models may be loading)."""
    stall_timeout_s: float = 15.0
    """Audio sent this long ago without word from the worker ends the session with
    ``provider_error`` and ``a5sv2_unavailable``."""
    resend_after_s: float = 3.0
    """Audio the worker has not acknowledged this long (it acknowledges about once a
    second) is published again, with every record after it: a record the broker
    acknowledged and then lost (a broker killed before its log reached the disk) leaves a
    gap the worker will not decode past. Duplicates are dropped by the worker."""
    finish_timeout_s: float = 30.0
    """How long ``finish`` waits for the final transcript."""
    lease_ttl_s: float = 30.0
    """Live-session slot lease in Redis, renewed every third of it while the session lives."""
    worker_max_sessions: int = 15
    """Sessions one worker decodes at once; more get ``a5sv2_unavailable``. On 2 cores a
    worker keeps 15 in real time with finals at p95 about 0.65 s; at 18 the p95 passes
    0.8 s (docs/realtime.md, "Sessions a worker")."""
    admit_final_lag_s: float = Field(1.0, ge=0)
    """A worker holding five sessions or more refuses a new one (``a5sv2_unavailable``)
    while its last 20 s of finals came, at p90, more than this after the audio they
    settle: on a slower host, or beside other work, the sessions it holds keep real time
    instead of all falling behind (docs/realtime.md, "Admission by the finals' lag").
    0: off, only ``worker_max_sessions`` counts."""
    worker_orphan_s: float = 90.0
    """A worker drops a session that received no audio record for this long."""
    log_keep_s: float = 15.0
    """The worker deletes the live topics' records older than this (never less than
    ``stall_timeout_s``) that no session it holds, or waits to open, still needs: for a
    live session, what came before its latest checkpoint. Retention is the bound
    otherwise. The embedded broker's CPU grows with what its log holds. 0: off."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="A5S_", env_nested_delimiter="__", frozen=True,
                                      extra="ignore")

    data_dir: Path = Path("./a5s-data")
    host: str = "127.0.0.1"
    port: int = 8000
    console_port: int = 8001
    public_url: str = ""
    """Base URL clients use to reach the gateway (for Location and upload URLs)."""

    kafka_bootstrap: str = ""
    clickhouse_url: str = ""
    clickhouse_database: str = "a5s"
    clickhouse_batch_s: float = Field(1.0, ge=0, le=60)
    """On the embedded engine, how long the job path's rows wait in the insert log before
    one insert a table writes them (``stores.insert_log``; every read inserts them first).
    0: each row is inserted at once."""
    redis_url: str = ""
    object_store: Literal["fs", "s3"] = "fs"
    s3_endpoint: str = ""
    s3_bucket: str = "a5s"
    s3_region: str = "us-east-1"
    s3_access_key: SecretStr = SecretStr("")
    s3_secret_key: SecretStr = SecretStr("")

    topic_prefix: str = "a5s."
    partitions: int = 4
    log_keep_s: float = 30.0
    """The workers delete the batch topics' records their consumer group committed this
    long ago (``pipeline.log_trim``; the public ``transcripts.completed`` is kept for its
    retention). The embedded broker's CPU grows with what its log holds. 0: off."""
    completed_keep_records: int = Field(1000, ge=0)
    """``transcripts.completed`` keeps at most this many records a partition besides its
    30-day retention (the retention sweep deletes the oldest beyond it, every 5 minutes);
    0: the retention alone. The embedded broker holds its log in memory and rewrites it to
    disk every few seconds, about 8 KB a transcript: 1,000 a partition keeps the newest
    4,000 or so transcripts there, for consumers that read within hours. A deployment on
    Apache Kafka, which keeps its log on disk, sets 0."""
    replication_factor: int = 1
    app_id: str = "a5s"
    embedded: EmbeddedPorts = EmbeddedPorts()
    restart_delay_max_s: float = Field(30.0, ge=0)
    """``a5s up`` restarts a service that died after 2 s, doubling while it keeps dying within
    30 s of its start, up to this."""

    limits: DefaultLimits = DefaultLimits()
    webhooks: WebhookSettings = WebhookSettings()
    models: ModelSettings = ModelSettings()
    realtime: RealtimeSettings = RealtimeSettings()

    allow_private_audio_urls: bool = False
    """Lets ``audio_url`` reach private and loopback addresses (tests, trusted networks)."""
    max_download_bytes: int = 5 << 30
    """An ``audio_url`` larger than this fails with ``file_too_large`` (spec: 5 GB)."""
    download_timeout_s: float = 900.0
    """An ``audio_url`` download, redirects included, must finish within this (spec: 15 min)."""
    max_upload_bytes: int = 1 << 30
    max_presigned_upload_bytes: int = 5 << 30
    upload_ttl_s: int = 24 * 3600
    upload_url_ttl_s: int = 3600
    stage_retries: int = 3
    create_default_account: bool = True
    console_token: SecretStr = SecretStr("")
    """Token for the console API; empty means a generated one in ``<data_dir>/console.token``."""
    log_level: str = "INFO"

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings],
                                   init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_path = Path(os.environ.get("A5S_CONFIG", "a5s.toml"))
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if toml_path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=toml_path))
        return tuple(sources)

    # --- derived locations -----------------------------------------------------------------

    @property
    def data_path(self) -> Path:
        return self.data_dir.resolve()

    @property
    def embedded_kafka(self) -> bool:
        return not self.kafka_bootstrap

    @property
    def bootstrap(self) -> str:
        return self.kafka_bootstrap or f"127.0.0.1:{self.embedded.kafka}"

    @property
    def clickhouse_dsn(self) -> str:
        return self.clickhouse_url or f"chdb://{self.data_path / 'clickhouse'}"

    @property
    def redis_dsn(self) -> str:
        return self.redis_url or f"redis://127.0.0.1:{self.embedded.redis}/0"

    @property
    def base_url(self) -> str:
        return (self.public_url or f"http://{self.host}:{self.port}").rstrip("/")

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.console_port}"


class SettingsError(ValueError):
    """A bad ``A5S_*`` variable or config entry, in one line fit for a terminal."""


def load_settings(data_dir: str | None = None) -> Settings:
    """The settings of an entry point (``data_dir`` overrides ``A5S_DATA_DIR``).

    Raises:
        SettingsError: naming the first bad variable, what is wrong and the value given.
    """
    try:
        return Settings(data_dir=data_dir) if data_dir else Settings()  # type: ignore[arg-type]
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        name = "A5S_" + "__".join(str(p) for p in err.get("loc", ())).upper()
        raise SettingsError(f"setting {name} (or its entry in $A5S_CONFIG): "
                            f"{err.get('msg', 'invalid value')} "
                            f"(got {err.get('input')!r})") from exc
