"""Row shapes of the ClickHouse tables (``stores/ddl``), and their mapping to API resources."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from .api import (AccountModels, AsyncModelEntry, JobError, StreamingModelEntry,
                  TranscriptSummary, UsageLimit)
from .records import AccountLimits

__all__ = ["AccountRow", "ApiKeyRow", "TranscriptRow", "UsageEventRow", "STATE_RANK",
           "version_for", "as_utc"]

STATE_RANK = {"queued": 1, "processing": 2, "completed": 3, "error": 3, "deleted": 9}


def as_utc(value: datetime | None) -> datetime | None:
    """ClickHouse hands back naive datetimes in UTC; make them aware."""
    if value is None:
        return None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def version_for(status: str, at: datetime | None = None) -> int:
    """Later states win over earlier ones whatever the write order (at-least-once delivery)."""
    at = at or datetime.now(UTC)
    return STATE_RANK[status] * 10**13 + int(at.timestamp() * 1000)


class _Row(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @field_validator("*", mode="after")
    @classmethod
    def _utc(cls, value: Any) -> Any:
        return as_utc(value) if isinstance(value, datetime) else value


class AccountRow(_Row):
    id: str
    email: str
    display_name: str
    created_at: datetime
    status: Literal["active", "suspended", "disabled"] = "active"
    tier: str = "free"
    usage_limit_seconds: float
    async_enabled: bool = True
    streaming_enabled: bool = True
    max_concurrent_jobs: int
    max_queued_jobs: int
    max_requests_per_minute: int
    max_audio_duration_seconds: int
    retention_days: int
    max_concurrent_sessions: int
    max_session_seconds: int
    webhook_secret: str
    updated_at: datetime

    @property
    def limits(self) -> AccountLimits:
        return AccountLimits(usage_limit_seconds=self.usage_limit_seconds,
                             max_concurrent_jobs=self.max_concurrent_jobs,
                             max_queued_jobs=self.max_queued_jobs,
                             max_audio_duration_seconds=self.max_audio_duration_seconds)

    def usage(self, used: float, reserved: float) -> UsageLimit:
        remaining = max(0.0, self.usage_limit_seconds - used - reserved)
        return UsageLimit(limit_seconds=self.usage_limit_seconds, used_seconds=round(used, 3),
                          reserved_seconds=round(reserved, 3),
                          remaining_seconds=round(remaining, 3))

    def models(self, jobs_queued: int, jobs_processing: int) -> AccountModels:
        return AccountModels.model_validate({
            "a5s-async-v1": AsyncModelEntry(
                enabled=self.async_enabled, max_concurrent_jobs=self.max_concurrent_jobs,
                max_queued_jobs=self.max_queued_jobs,
                max_requests_per_minute=self.max_requests_per_minute,
                max_audio_duration_seconds=self.max_audio_duration_seconds,
                retention_days=self.retention_days, jobs_queued=jobs_queued,
                jobs_processing=jobs_processing),
            "a5s-v2-streaming": StreamingModelEntry(
                enabled=self.streaming_enabled,
                max_concurrent_sessions=self.max_concurrent_sessions,
                max_session_seconds=self.max_session_seconds),
        })


class ApiKeyRow(_Row):
    key_hash: str
    key_id: str
    account_id: str
    name: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None
    updated_at: datetime


class TranscriptRow(_Row):
    id: str
    account_id: str
    key_id: str
    created_at: datetime
    status: str
    started_at: datetime | None = None
    completed_at: datetime | None = None
    audio_url: str | None = None
    file_id: str | None = None
    language_code: str = "en"
    model: str = "a5s-async-v1"
    audio_duration: float | None = None
    metadata: str = "{}"
    webhook_url: str | None = None
    webhook_status_code: int | None = None
    error_code: str | None = None
    error_message: str | None = None
    deleted: int = 0
    version: int = 0

    def summary(self) -> TranscriptSummary:
        error = (JobError(code=self.error_code, message=self.error_message or "")
                 if self.error_code else None)
        status = self.status if self.status in ("queued", "processing", "completed",
                                                "error") else "error"
        return TranscriptSummary(
            id=self.id, status=status, created_at=self.created_at,
            started_at=self.started_at, completed_at=self.completed_at,
            audio_url=self.audio_url, file_id=self.file_id, language_code=self.language_code,
            model=self.model, audio_duration=self.audio_duration,
            metadata=json.loads(self.metadata or "{}"), webhook_url=self.webhook_url,
            webhook_status_code=self.webhook_status_code, error=error)


class UsageEventRow(_Row):
    event_id: str
    account_id: str
    key_id: str
    model: str
    kind: Literal["request", "completed", "failed", "stream"]
    at: datetime
    audio_seconds: float = 0.0
    transcript_id: str = ""
