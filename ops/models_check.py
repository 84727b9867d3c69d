"""``a5s models check DIR`` (the start-up check of the engine settings is
:func:`pipeline.worker.startup_check`).

The check says which icefall export a directory holds, what its files declare
(model type, vocabulary size, streaming or not), and decodes a bundled clip (JFK's
"ask not", public domain, ``ops/assets/jfk.ogg``) with the engine the service would
build from it, printing the words and their times.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["check_dir", "CLIP"]

CLIP = Path(__file__).parent / "assets" / "jfk.ogg"


def _onnx_meta(path: Path) -> dict[str, str]:
    import onnx
    model = onnx.load(str(path), load_external_data=False)
    return {p.key: p.value for p in model.metadata_props}


def check_dir(model_dir: Path, echo: Callable[[str], None] = print) -> None:
    """Describe ``model_dir`` and decode the bundled clip with it.

    Raises:
        FileNotFoundError: no complete export in the directory.
    """
    from pipeline.audio import decode_to_pcm, read_pcm
    from pipeline.models import resolve_torchscript, resolve_transducer, zipformer_form
    form = zipformer_form(model_dir)
    echo(f"directory: {model_dir.resolve()}")
    echo(f"form:      {form}")
    streaming = False
    if form == "onnx":
        files = resolve_transducer(model_dir)
        enc, dec = _onnx_meta(files.encoder), _onnx_meta(files.decoder)
        streaming = "decode_chunk_len" in enc
        for label, path in (("encoder", files.encoder), ("decoder", files.decoder),
                            ("joiner", files.joiner), ("tokens", files.tokens)):
            echo(f"{label + ':':<10} {path.name} ({path.stat().st_size / 1e6:.1f} MB)")
        echo(f"model:     {enc.get('model_type', '?')}, vocabulary {dec.get('vocab_size', '?')}, "
             f"context {dec.get('context_size', '?')}, "
             + (f"streaming (chunk {enc['decode_chunk_len']} frames)" if streaming
                else "non-streaming"))
        echo("serves:    " + ("a5s-v2-streaming (A5S_MODELS__STREAMING_MODEL_DIR)" if streaming
                              else "a5s-async-v1 (A5S_MODELS__BATCH_MODEL_DIR)"))
    else:
        path, tokens = resolve_torchscript(model_dir)
        echo(f"model:     {path.name} ({path.stat().st_size / 1e6:.1f} MB), tokens {tokens.name}")
        echo("serves:    a5s-async-v1 (A5S_MODELS__BATCH_MODEL_DIR)")
    with tempfile.TemporaryDirectory() as tmp:
        pcm = Path(tmp) / "clip.pcm"
        with pcm.open("wb") as out:
            decode_to_pcm(CLIP, out)
        audio = read_pcm(pcm)
        started = time.perf_counter()
        text = _decode(model_dir, form, streaming, audio, Path(tmp))
        took = time.perf_counter() - started
    echo(f"test clip: {CLIP.name}, {audio.size / 16000:.1f} s, decoded in {took:.2f} s")
    echo(f"result:    {text or '(no words)'}")


def _decode(model_dir: Path, form: str, streaming: bool, audio, tmp: Path) -> str:
    if streaming:
        import asyncio

        from pipeline.realtime.zipformer import ZipformerModel, ZipformerRealtimeEngine

        async def run() -> str:
            engine = ZipformerRealtimeEngine(ZipformerModel(model_dir, tmp))
            engine.open("check")
            pcm = (audio * 32767).astype("<i2").tobytes()
            for i in range(0, len(pcm), 6400):
                await engine.accept("check", pcm[i:i + 6400])
            text = (await engine.finish("check"))[-1].text
            await engine.aclose()
            return text
        return asyncio.run(run())
    from pipeline.engines import AsrLayout, load_zipformer
    from schemas.settings import ModelSettings
    m = ModelSettings(batch_engine="zipformer", batch_model_dir=str(model_dir))
    engine = load_zipformer(m, AsrLayout.of(m))
    del form
    return " ".join(f"{w.text}[{w.start:.2f}-{w.end:.2f}]" for w in engine.transcribe(audio, 0.0))
