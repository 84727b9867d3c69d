-- a5s schema v1. Mutable rows use ReplacingMergeTree with an explicit version; reads use FINAL.
CREATE TABLE IF NOT EXISTS {db}.accounts (
    id String,
    email String,
    display_name String,
    created_at DateTime64(3, 'UTC'),
    status LowCardinality(String),            -- active | suspended | disabled
    tier LowCardinality(String),
    usage_limit_seconds Float64,
    async_enabled UInt8,
    streaming_enabled UInt8,
    max_concurrent_jobs UInt32,
    max_queued_jobs UInt32,
    max_requests_per_minute UInt32,
    max_audio_duration_seconds UInt32,
    retention_days UInt32,
    max_concurrent_sessions UInt32,
    max_session_seconds UInt32,
    webhook_secret String,
    updated_at DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree(updated_at) ORDER BY id;

CREATE TABLE IF NOT EXISTS {db}.api_keys (
    key_hash String,                          -- SHA-256 hex of the key; the key itself is never stored
    key_id String,
    account_id String,
    name String,
    prefix String,                            -- first characters, to recognise a key in listings
    created_at DateTime64(3, 'UTC'),
    revoked_at Nullable(DateTime64(3, 'UTC')),
    updated_at DateTime64(6, 'UTC')
) ENGINE = ReplacingMergeTree(updated_at) ORDER BY key_hash;

CREATE TABLE IF NOT EXISTS {db}.transcripts (
    id String,
    account_id String,
    key_id String,
    created_at DateTime64(3, 'UTC'),
    status LowCardinality(String),
    started_at Nullable(DateTime64(3, 'UTC')),
    completed_at Nullable(DateTime64(3, 'UTC')),
    audio_url Nullable(String),
    file_id Nullable(String),
    language_code LowCardinality(String),
    model LowCardinality(String),
    audio_duration Nullable(Float64),
    metadata String,                          -- JSON object
    webhook_url Nullable(String),
    webhook_status_code Nullable(Int32),
    error_code Nullable(String),
    error_message Nullable(String),
    deleted UInt8,
    version UInt64                            -- state rank * 1e13 + epoch ms: later states win
) ENGINE = ReplacingMergeTree(version) ORDER BY (account_id, id);

CREATE TABLE IF NOT EXISTS {db}.transcript_results (
    id String,
    account_id String,
    completed_at DateTime64(3, 'UTC'),
    text String,
    result String,                            -- JSON: text, speakers, utterances, words
    deleted UInt8,
    version UInt64
) ENGINE = ReplacingMergeTree(version) ORDER BY (account_id, id);

CREATE TABLE IF NOT EXISTS {db}.usage_events (
    event_id String,                          -- idempotent: a replayed event replaces itself
    account_id String,
    key_id String,
    model LowCardinality(String),
    kind LowCardinality(String),              -- request | completed | failed | stream
    at DateTime64(3, 'UTC'),
    audio_seconds Float64,
    transcript_id String
) ENGINE = ReplacingMergeTree ORDER BY (account_id, model, kind, event_id);
