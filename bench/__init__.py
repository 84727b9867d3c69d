"""Benchmarks: accuracy, speed and memory figures of the models and the service.

Run from the repository root, e.g. ``python -m bench.pipeline --asterisk16 600 --accounts 8``.
Not part of the installed package and imported by no test; scoring they share with the
tests lives in :mod:`evaluation`.
"""
