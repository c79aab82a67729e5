"""The contract both executors run: records and the executor protocol (``boundary``), the augmentation
spec (``augment``), reading, labelling, the output stage (``tensors``, ``transfer``), synthetic data."""
