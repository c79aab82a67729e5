"""The benchmark (``python -m bench``, also ``dali-backend bench``) and its measurements.

Importing this package is light: the contenders (torch, OpenCV, DALI) load only when they run.
"""

CONTENDERS = ("ceiling", "reference", "tutorial", "fallback", "dali-cpu", "dali-gpu", "recipe-fallback", "recipe-dali-cpu",
              "recipe-dali-gpu")
