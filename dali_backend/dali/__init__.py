"""The DALI executor: DALI's graph on the GPU or on CPU operators, behind the executor protocol.

Importing this package does not import ``nvidia.dali``; its modules do, when a DALI loader is built.
``graph`` builds the pipeline, ``wire`` is the ring of planned rows shared with DALI's reader
workers, ``workers`` their process hygiene, ``runner`` and ``executor`` run passes, ``devices``
places the outputs, ``handoff`` passes batches to the facade, ``failures`` reads DALI's error text.
"""
