"""Shared fixtures for the pipeline engines: eval audio, loaded models, a decode-to-words helper.

Models load once per session; the eval set lives in ``../shared/eval`` beside
the repository.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may come from the hub, ever

from pipeline.asr import AsrEngine, WhisperEngine, WhisperOptions  # noqa: E402
from pipeline.audio import decode_to_pcm, read_pcm  # noqa: E402
from pipeline.models import resolve_whisper  # noqa: E402
from pipeline.types import TimedWord  # noqa: E402
from pipeline.vad import SileroVad, VadOptions, plan_chunks, speech_regions  # noqa: E402

from asr_support import EVAL  # noqa: E402


@pytest.fixture(scope="session")
def manifest() -> dict[str, dict]:
    if not (EVAL / "manifest.json").is_file():
        pytest.fail(f"eval set not found at {EVAL}: it must sit beside the repository")
    items = json.loads((EVAL / "manifest.json").read_text())["items"]
    return {item["path"]: item for item in items}


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="session")
def whisper_tiny(model_cache: Path) -> WhisperEngine:
    return WhisperEngine(resolve_whisper("tiny.en", model_cache), WhisperOptions(cpu_threads=2),
                         name="whisper:tiny.en")


@pytest.fixture(scope="session")
def whisper_base(model_cache: Path) -> WhisperEngine:
    return WhisperEngine(resolve_whisper("base", model_cache), WhisperOptions(cpu_threads=2),
                         name="whisper:base")


@pytest.fixture(scope="session")
def vad_model() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="session")
def embedder():
    """The speaker embedding model (CAM++), loaded once."""
    from pipeline.diarization import SpeakerEmbedder
    return SpeakerEmbedder()


@pytest.fixture(scope="session")
def diarizer(embedder):
    """The diarizer with its default options, sharing ``embedder``."""
    from pipeline.diarization import DiarizationOptions, Diarizer
    return Diarizer(embedder, DiarizationOptions())


@pytest.fixture
def transcribe_file(tmp_path: Path, vad_model: SileroVad
                    ) -> Callable[[Path, AsrEngine], list[TimedWord]]:
    """Decode, find speech, plan chunks and recognise them: the batch path without Kafka."""

    def run(path: Path, engine: AsrEngine, opts: VadOptions = VadOptions()) -> list[TimedWord]:
        pcm = tmp_path / f"{path.stem}.pcm"
        with pcm.open("wb") as out:
            decode_to_pcm(path, out)
        words: list[TimedWord] = []
        for chunk in plan_chunks(speech_regions(pcm, opts, vad_model), opts):
            words += engine.transcribe(read_pcm(pcm, chunk), chunk.start)
        return words

    return run
