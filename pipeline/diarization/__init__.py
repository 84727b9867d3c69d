"""Diarization stage: speaker embeddings, clustering, and the speaker-attributed transcript.

Build once per worker and pass in::

    diarizer = Diarizer(SpeakerEmbedder(), DiarizationOptions())
    turns = diarizer.diarize(audio, speech_regions)
    result = assemble(words, turns)
"""

from .assemble import AssembleOptions, assemble, speaker_id
from .clustering import cluster_embeddings
from .diarizer import Diarizer
from .embedding import SpeakerEmbedder
from .options import DiarizationOptions

__all__ = ["AssembleOptions", "DiarizationOptions", "Diarizer", "SpeakerEmbedder", "assemble",
           "cluster_embeddings", "speaker_id"]
