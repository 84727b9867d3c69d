"""PII redaction on ``/v2`` with the official ``assemblyai`` SDK against the embedded stack.

``tests/data/pii_call.wav`` (18.6 s, 16 kHz mono) is a spoken card number, phone number and
e-mail address, made once with espeak-ng and committed, so nothing here needs it::

    espeak-ng -v en-us -s 150 -w a.wav "My card number is four two four two, four two four
      two, four two four two, four two four two. My phone number is four one five, five
      five five, zero one three two."
    espeak-ng -v en-us -s 130 -g 6 -w b.wav "My email is john, at example, dot com."

(each resampled to 16 kHz and followed by 0.5 s of silence). The text comes back redacted,
the audio under the redacted words is silent, and the words as spoken are nowhere the job
wrote: not in ClickHouse (every table), not on any topic, not in the webhook body, not in
the service's log.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import time
import wave
from pathlib import Path

import assemblyai as aai
import httpx
import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from ops.stack import REPO, Stack
from pipeline.redaction import AUDIO_PAD_S
from topologies.topics import TOPICS

from .test_webhooks import Receiver, receiver  # noqa: F401 - the fixture, by import

pytestmark = pytest.mark.stack

CALL = REPO / "tests" / "data" / "pii_call.wav"
SPOKEN = ("4242", "0132", "john")
"""What the recogniser hears of the card, the phone number and the address."""
ALL_POLICIES = [aai.PIIRedactionPolicy.credit_card_number, aai.PIIRedactionPolicy.phone_number,
                aai.PIIRedactionPolicy.email_address,
                aai.PIIRedactionPolicy.us_social_security_number,
                aai.PIIRedactionPolicy.number_sequence]


@pytest.fixture(scope="module")
def account(stack: Stack) -> tuple[str, str]:
    account_id, key = stack.new_account()
    aai.settings.base_url = stack.url("")
    aai.settings.api_key = key
    aai.settings.polling_interval = 1.0
    aai.settings.http_timeout = 60.0
    return account_id, key


def _samples(wav_bytes: bytes) -> np.ndarray:
    with wave.open(io.BytesIO(wav_bytes)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (16000, 1, 2)
        return np.frombuffer(wav.readframes(wav.getnframes()), "<i2")


def _clickhouse_rows(stack: Stack, needle: str) -> list[str]:
    """Every row of every table of the service's database that mentions ``needle``."""
    token = (stack.data_dir / "console.token").read_text().strip()

    def query(sql: str) -> str:
        resp = httpx.get(f"http://127.0.0.1:{stack.console_port}/", params={"query": sql},
                         auth=("default", token), timeout=60)
        assert resp.status_code == 200, resp.text
        return resp.text

    tables = query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                   "AND engine NOT LIKE '%View%' FORMAT TSV").split()
    assert {"transcripts", "transcript_results"} <= set(tables), tables
    rows = []
    for table in tables:
        rows += [line for line in query(f"SELECT * FROM {table} FORMAT JSONEachRow").splitlines()
                 if needle in line]
    return rows


def _topic_records(stack: Stack, needle: str) -> dict[str, list[bytes]]:
    """Every record on every batch topic whose key or value mentions ``needle``."""
    async def read() -> dict[str, list[bytes]]:
        names = [f"a5s.{t.name}" for t in TOPICS if not t.name.startswith("realtime")]
        consumer = AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:"
                                    f"{stack.env['A5S_EMBEDDED__KAFKA']}",
                                    enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            parts = [TopicPartition(n, p) for n in names
                     for p in (consumer.partitions_for_topic(n) or await _partitions(consumer, n))]
            consumer.assign(parts)
            await consumer.seek_to_beginning(*parts)
            ends = await consumer.end_offsets(parts)
            found: dict[str, list[bytes]] = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and [
                    p for p in parts if await consumer.position(p) < ends[p]]:
                for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                    for m in msgs:
                        raw = (m.key or b"") + b" " + (m.value or b"")
                        if needle.encode() in raw:
                            found.setdefault(tp.topic, []).append(m.value or b"")
            return found
        finally:
            await consumer.stop()

    return asyncio.run(read())


async def _partitions(consumer: AIOKafkaConsumer, topic: str) -> set[int]:
    await consumer._client.force_metadata_update()  # noqa: SLF001 - aiokafka has no public call
    return consumer.partitions_for_topic(topic) or set()


def test_card_phone_and_email_are_redacted_in_text_audio_and_every_store(
        stack: Stack, account: tuple[str, str], receiver: Receiver, tmp_path: Path) -> None:
    _, key = account
    config = aai.TranscriptionConfig(webhook_url=receiver.url("/pii")).set_redact_pii(
        policies=ALL_POLICIES, substitution=aai.PIISubstitutionPolicy.entity_name,
        redact_audio=True, redact_audio_quality=aai.types.PIIRedactedAudioQuality.wav,
        redact_audio_options={"override_audio_redaction_method": "silence"})
    with stack.no_uncaught_errors():
        transcript = aai.Transcriber().transcribe(str(CALL), config=config)
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    text = transcript.text or ""
    print(f"\nredacted: {text}")
    for tag in ("[CREDIT_CARD_NUMBER]", "[PHONE_NUMBER]", "[EMAIL_ADDRESS]"):
        assert tag in text, text
    assert not re.search(r"\d", text) and "john" not in text, text
    assert text.lower().startswith("my card number is") and "my email is" in text.lower()
    redacted = [w for w in transcript.words or [] if w.text.startswith("[")]
    assert {w.text for w in redacted} == {"[CREDIT_CARD_NUMBER]", "[PHONE_NUMBER]",
                                          "[EMAIL_ADDRESS]"}
    assert transcript.config.redact_pii and transcript.config.redact_pii_audio

    # the audio: as long as the call, silent under every redacted word, speech elsewhere
    saved = tmp_path / "redacted.wav"
    transcript.save_redacted_audio(str(saved))  # the SDK fetches the signed URL bare
    audio = _samples(saved.read_bytes())
    original = _samples(CALL.read_bytes())
    assert abs(len(audio) - len(original)) <= 16
    for w in redacted:
        lo, hi = int((w.start / 1000 - AUDIO_PAD_S) * 16000), int((w.end / 1000) * 16000)
        assert not audio[max(0, lo):hi].any(), w
        assert np.abs(original[max(0, lo):hi]).max() > 1000, w  # speech was there
    kept = [w for w in transcript.words or [] if not w.text.startswith("[")]
    assert all(np.abs(audio[int(w.start * 16):int(w.end * 16)]).max() > 1000 for w in kept)

    # the same file with the key; not to another account, not with a forged signature
    url = httpx.URL(transcript.get_redacted_audio_url())
    assert url.path == f"/v2/transcript/{transcript.id}/redacted-audio.wav"
    with stack.client(key) as c:
        assert c.get(url.path, headers={"Authorization": key}).content == saved.read_bytes()
    _, other = stack.new_account()
    refused = httpx.get(stack.url(url.path), headers={"Authorization": other}, timeout=30)
    assert refused.status_code == 404 and "error" in refused.json()
    forged = httpx.get(stack.url(url.path),
                       params={"expires": url.params["expires"], "signature": "0" * 64},
                       timeout=30)
    assert forged.status_code == 403 and "signature" in forged.json()["error"]

    # the words as spoken are nowhere the job wrote
    [hit] = receiver.wait("/pii", 1)
    body = hit.body
    assert json.loads(body) == {"transcript_id": transcript.id, "status": "completed"}
    rows = _clickhouse_rows(stack, transcript.id)
    assert any("[CREDIT_CARD_NUMBER]" in r for r in rows), "the result is in ClickHouse"
    records = _topic_records(stack, transcript.id)
    [completed] = records["a5s.transcripts.completed"]
    assert "[PHONE_NUMBER]" in completed.decode()
    log = stack.log_path.read_text(errors="replace")
    for needle in SPOKEN:
        assert not [r for r in rows if needle in r], needle
        assert not [(t, v) for t, vs in records.items() for v in vs if needle.encode() in v]
        assert needle.encode() not in body
        assert needle not in log

    # deleting the transcript deletes its redacted audio
    aai.Transcript.delete_by_id(transcript.id)
    with stack.client(key) as c:
        assert c.get(url.path, headers={"Authorization": key}).status_code == 404
    gone = httpx.get(str(url), timeout=30)
    assert gone.status_code == 404


def test_hash_substitution_and_beeped_mp3_by_default(stack: Stack,
                                                     account: tuple[str, str]) -> None:
    _, key = account
    config = aai.TranscriptionConfig().set_redact_pii(
        policies=[aai.PIIRedactionPolicy.phone_number], redact_audio=True)
    transcript = aai.Transcriber().transcribe(str(CALL), config=config)
    assert transcript.status == aai.TranscriptStatus.completed, transcript.error
    text = transcript.text or ""
    assert re.search(r"#{3,} #{3,} #{4,}", text) and "0132" not in text, text
    assert "4242" in text, "only the phone number was asked for"
    url = httpx.URL(transcript.get_redacted_audio_url())
    assert url.path.endswith("/redacted-audio.mp3")
    resp = httpx.get(str(url), timeout=30)
    assert resp.status_code == 200 and resp.headers["content-type"] == "audio/mpeg"
    import av
    with av.open(io.BytesIO(resp.content)) as container:
        samples = np.concatenate([f.to_ndarray().reshape(-1)
                                  for f in container.decode(audio=0)])
    phone = [w for w in transcript.words or [] if set(w.text) == {"#"}]
    assert len(phone) == 3
    inside = samples[int(phone[0].start * 16):int(phone[-1].end * 16)]
    spectrum = np.abs(np.fft.rfft(inside))
    assert abs(np.argmax(spectrum) * 16000 / len(inside) - 1000) < 5  # the beep


def test_refusals_reach_the_sdk_in_assemblyais_shape(stack: Stack,
                                                     account: tuple[str, str]) -> None:
    _, key = account
    with stack.client(key) as c:
        for body, message in (
                ({"redact_pii": True, "redact_pii_policies": ["person_name"]},
                 "named-entity model"),
                ({"redact_pii": True, "redact_pii_policies": ["shoe_size"]},
                 "Unknown PII policy"),
                ({"redact_pii": True}, "at least one policy"),
                ({"redact_pii_audio": True}, "needs redact_pii"),
                ({"redact_pii": True, "redact_pii_policies": ["phone_number"],
                  "redact_pii_return_unredacted": True}, "never stores")):
            resp = c.post("/v2/transcript", json={"audio_url": "https://cdn.example/a.wav",
                                                  **body}, headers={"Authorization": key})
            assert resp.status_code == 400 and message in resp.json()["error"], resp.text
        plain = c.post("/v2/upload", content=CALL.read_bytes(),
                       headers={"Authorization": key}).json()["upload_url"]
        tid = c.post("/v2/transcript", json={"audio_url": plain},
                     headers={"Authorization": key}).json()["id"]
        resp = c.get(f"/v2/transcript/{tid}/redacted-audio", headers={"Authorization": key})
        assert resp.status_code == 400 and "without redact_pii" in resp.json()["error"]
