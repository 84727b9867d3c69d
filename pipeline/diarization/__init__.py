"""Diarization stage: overlap-aware segmentation, speaker embeddings, clustering, and the
speaker-attributed transcript.

Build once per worker and pass in::

    diarizer = Diarizer(SpeakerEmbedder(), DiarizationOptions(), Segmenter())
    turns = diarizer.diarize(audio, speech_regions)
    result = assemble(words, turns)
"""

from .assemble import AssembleOptions, assemble, assemble_channels, speaker_id
from .clustering import cluster_embeddings
from .diarizer import Diarizer
from .embedding import SpeakerEmbedder
from .options import DiarizationOptions
from .segmentation import Segmenter

__all__ = ["AssembleOptions", "DiarizationOptions", "Diarizer", "Segmenter", "SpeakerEmbedder",
           "assemble", "assemble_channels", "cluster_embeddings", "speaker_id"]
