"""Shipped reference kernels: for each contract class a ``good``, a ``bad`` and a ``baseline``.

``kcgate calibrate`` runs all three against the class's built-in contract (three-state calibration).
"""
