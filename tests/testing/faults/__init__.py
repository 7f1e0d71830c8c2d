"""Planted faults written to measure signature accuracy (not the calibration kernels): see corpus.py."""
