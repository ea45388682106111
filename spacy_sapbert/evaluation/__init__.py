"""The paper's evaluation: benchmark readers, BioSyn-style preprocessing, lenient and strict metrics.

Import the submodules directly; nothing heavy happens at import time.
"""
