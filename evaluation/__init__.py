"""Scoring against the eval set's references: WER text conventions, item selection,
diarization error, and what a live transcript leaves out.

Plain functions over references and hypotheses, shared by the benchmarks (``bench/``) and
the tests that judge the service's output; nothing here imports the service. Needs the
``eval`` extra (``jiwer``, ``whisper-normalizer``) for alignment and normalisation.
"""
