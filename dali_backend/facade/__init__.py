"""The facade: ``loader`` (``DaliLoader``, ``FallbackLoader``) and its parts, ``epochs`` (passes,
accounting, resumption), ``changes`` (data changes between epochs), ``clipbatches`` (a batch of frames,
or of frames regrouped into clips), ``arguments`` (checking them, the backend choice), ``autotune`` (``num_workers="auto"``).

This package module imports nothing, so that a part (``autotune``'s cache folder, say) loads without torch.
"""
