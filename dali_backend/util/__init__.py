"""Helpers below the contract: ``strings`` (a string table in numpy arrays), ``memory``, ``progress``,
``procstats`` (this process's CPU time and memory)."""
