"""The benchmark (``python -m bench``, also ``dali-backend bench``) and its measurements.

Importing this package is light: the contenders (torch, OpenCV, DALI) load only when they run.
"""

CONTENDERS = ("ceiling", "reference", "tutorial", "fallback", "dali-cpu", "dali-gpu", "recipe-fallback", "recipe-dali-cpu",
              "recipe-dali-gpu")
"""The contenders a plain ``python -m bench`` runs (those this machine can)."""
CLIP_CONTENDERS = ("clips-fallback", "clips-dali-cpu", "clips-dali-gpu")
"""Clip loaders (``ClipSampler``, ``[B, T, C, H, W]`` batches; img/s counts frames), run when named with ``--only``."""
THREAD_CONTENDERS = ("fallback-threads",)
"""``DaliLoader(backend="torch-threads")``: the fallback's work on threads of the loader's process, run when named
with ``--only`` (``--only fallback fallback-threads`` sets the two executors side by side)."""
PEERS = ("opencv-loader", "albumentations", "spdl-threads", "torchdata-nodes", "dali-native")
"""What a user would write instead (``--peers``, :mod:`bench.peers`): the default contract by hand."""
OWN_CEILINGS = {"dali-cpu": "ceiling-dali", "clips-dali-cpu": "ceiling-dali"}
"""The ceiling of each loader that decodes and equalises with other code than the ``ceiling``'s (OpenCV): DALI's
CPU operators' own decode + CLAHE (:class:`bench.contenders.DaliCeiling`), run whenever such a loader runs."""
ALL_CONTENDERS = CONTENDERS + THREAD_CONTENDERS + CLIP_CONTENDERS + PEERS + ("ceiling-dali",)
