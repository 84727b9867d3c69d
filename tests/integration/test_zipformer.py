"""The Zipformer engines through the running service: a batch job and a live session.

No transducer weights ship in any package, so the stack is started on tiny random-weight
models these tests export themselves (``tests/unit/pipeline/tiny_transducer.py``): a
non-streaming one as ONNX or as TorchScript for ``a5s-async-v1``, and a streaming
Zipformer2-layout ONNX export for ``a5s-v2-streaming``. Their words are gibberish from a
22-piece vocabulary, which is what tells them from Whisper's: every word must be spelt
from those pieces, and JFK's "fellow Americans" (which Whisper hears) must be absent.
"""

from __future__ import annotations

import asyncio
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from schemas.api import Word
from ops.stack import EVAL, REPO, EvalServer, Stack

sys.path.insert(0, str(REPO / "tests" / "unit" / "pipeline"))
from tiny_transducer import (TOKENS, build_tiny_streaming_transducer,  # noqa: E402
                             build_tiny_torchscript, build_tiny_transducer)

pytestmark = pytest.mark.stack

JFK = "real/whisper/jfk.flac"
PIECES = {t.lstrip("\u2581").lower() for t in TOKENS if not t.startswith("<")}


def spelt_from_pieces(word: str) -> bool:
    ok = [True] + [False] * len(word)
    for end in range(1, len(word) + 1):
        ok[end] = any(ok[s] and word[s:end] in PIECES for s in range(end))
    return ok[-1]


@pytest.fixture(scope="module", params=["onnx", "torchscript"])
def zf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp(f"zipformer-{request.param}")
    batch = (build_tiny_transducer if request.param == "onnx" else build_tiny_torchscript)(
        root / "batch")
    streaming = build_tiny_streaming_transducer(root / "streaming")
    env = {"A5S_MODELS__BATCH_ENGINE": "zipformer", "A5S_MODELS__BATCH_MODEL_DIR": str(batch),
           "A5S_MODELS__STREAMING_ENGINE": "zipformer",
           "A5S_MODELS__STREAMING_MODEL_DIR": str(streaming),
           "A5S_REALTIME__PROVIDER_START_TIMEOUT_S": "120",
           "A5S_REALTIME__BURST_MS": "30000"}  # the live test sends faster than real time
    s = Stack(root / "data", env=env)
    s.data_dir.mkdir(parents=True)
    s.start()
    yield s
    s.stop()


def test_models_and_health_name_the_engine(zf: Stack) -> None:
    models = httpx.get(zf.url("/v1/models")).json()["data"]
    assert {m["id"]: m["engine"] for m in models} == {"a5s-async-v1": "zipformer",
                                                      "a5s-v2-streaming": "zipformer"}
    health = httpx.get(zf.url("/health")).json()
    assert health["engines"] == {"a5s-async-v1": "zipformer", "a5s-v2-streaming": "zipformer"}


def test_batch_job_has_zipformer_words_with_times(zf: Stack, eval_server: EvalServer) -> None:
    _, key = zf.new_account()
    with zf.client(key) as client:
        resp = client.post("/v1/transcripts", json={"audio_url": eval_server.url(JFK)})
        assert resp.status_code == 201, resp.text
        body = zf.wait_transcript(client, resp.json()["id"], timeout_s=300)
    assert body["status"] == "completed", body.get("error")
    words = body["words"]
    assert len(words) >= 5, body["text"]
    assert body["text"] == " ".join(w["text"] for w in words)
    assert all(spelt_from_pieces(w["text"]) for w in words), body["text"]
    assert "fellow" not in body["text"] and "americans" not in body["text"]
    assert all(0 <= w["start"] <= w["end"] <= body["audio_duration"] + 0.01 for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words)
    assert all(set(w) == set(Word.model_fields) for w in words)  # the shape Whisper's have
    assert words[-1]["start"] - words[0]["start"] > 3, "times span the clip, not one point"


def pcm(path: Path) -> bytes:
    from pipeline.audio import decode_to_pcm
    out = io.BytesIO()
    decode_to_pcm(path, out)
    return out.getvalue()


def test_live_session_streams_partials_and_a_final(zf: Stack) -> None:
    _, key = zf.new_account()
    speech = pcm(EVAL / JFK)
    # speech, 1.5 s of silence (an endpoint settles the first segment), speech again
    audio = speech[: 5 * 32000] + bytes(48000) + speech[5 * 32000:]
    terms = [{"text": "ask not", "strength": 12}, {"text": "Kubernetes", "strength": 6},
             {"text": "So", "strength": 0}]

    async def go() -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {key}"}
        async with websockets.connect(zf.ws_url, additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "start", "custom_vocabulary_enabled": True,
                                      "custom_vocabulary": terms}))
            while (msg := json.loads(await ws.recv()))["type"] != "ready":
                assert msg["type"] == "provider_status", msg
            messages: list[dict[str, Any]] = []

            async def reader() -> None:
                async for raw in ws:
                    messages.append(json.loads(raw))

            task = asyncio.create_task(reader())
            step = 3200  # 100 ms
            for i in range(0, len(audio), step):
                await ws.send(audio[i:i + step])
                await asyncio.sleep(0.05)  # twice real time (the burst setting allows it)
            await ws.send(json.dumps({"type": "finish"}))
            await asyncio.wait_for(task, 120)
            return messages

    messages = asyncio.run(asyncio.wait_for(go(), 240))
    assert all(m["type"] != "error" for m in messages), messages
    transcripts = [m for m in messages if m["type"] == "transcript"]
    partials = [m for m in transcripts if not m["is_final"]]
    finals = [m for m in transcripts if m["is_final"]]
    assert len(partials) >= 10, f"partials come chunk by chunk, got {len(partials)}"
    assert len(finals) >= 2, "the silence ended a segment before the end of the stream"
    assert messages[-1]["type"] == "finished"
    text = finals[-1]["text"]
    sentences = [s for s in text.split(". ") if s]
    assert len(sentences) >= 2 and text.endswith("."), text
    assert all(s[0].isupper() for s in sentences), text
    words = text.replace(".", " ").split()
    assert all(spelt_from_pieces(w.lower()) for w in words), text
    assert "fellow" not in text.lower()
    # each message carries the whole transcript so far: the last final extends the first
    assert text.startswith(finals[0]["text"])


def test_default_configuration_runs_whisper(stack: Stack) -> None:
    models = httpx.get(stack.url("/v1/models")).json()["data"]
    assert {m["id"]: m["engine"] for m in models} == {"a5s-async-v1": "whisper",
                                                      "a5s-v2-streaming": "whisper"}
    assert httpx.get(stack.url("/health")).json()["engines"] == {
        "a5s-async-v1": "whisper", "a5s-v2-streaming": "whisper"}
