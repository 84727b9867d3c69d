"""A local check that a file is audio, made before anything is sent."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["probe_audio"]


def probe_audio(path: str | Path) -> None:
    """Raise ``ValueError`` with a one-line reason unless ``path`` is a readable audio file.

    A missing file, a directory, an unreadable file or one PyAV cannot find and decode
    an audio stream in fails here, in a second, instead of after an upload or at the
    end of a live session's idle timeout.
    """
    import av

    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such file")
    if not path.is_file():
        raise ValueError(f"{path}: not a file")
    if not os.access(path, os.R_OK):
        raise ValueError(f"{path}: permission denied")
    if path.stat().st_size == 0:
        raise ValueError(f"{path}: the file is empty")
    try:
        with av.open(str(path)) as container:
            stream = next((s for s in container.streams if s.type == "audio"), None)
            decoded = stream is not None and next(iter(container.decode(stream)), None)
    except (av.FFmpegError, OSError, UnicodeDecodeError) as exc:  # PyAV's errors first:
        reason = getattr(exc, "strerror", None) or str(exc)  # some are ValueErrors too
        raise ValueError(f"{path}: not an audio or video file ({reason})") from exc
    if stream is None:
        raise ValueError(f"{path}: no audio stream in this file")
    if decoded is None:
        raise ValueError(f"{path}: the audio stream holds no audio")
