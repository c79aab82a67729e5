"""Which draws, in which order: ``sampler`` (weighted draws per epoch and rank), ``sequences`` and
``clips`` (windows of frames), ``grouping`` (aspect groups), ``schedule``."""
