"""Typed exceptions. Every message names the file or argument, the offending value, and the fix."""

from __future__ import annotations


class DaliBackendError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(DaliBackendError, ValueError):
    """An argument has a value this library cannot use (names the argument and the fix)."""


class IndexBuildError(DaliBackendError, ValueError):
    """A sample index could not be built from the given folder or manifest."""


class ManifestError(IndexBuildError):
    """A manifest file is malformed or refers to files outside the data root."""


class IndexFileError(DaliBackendError, ValueError):
    """A saved index file is unreadable, of another format version, or was modified."""


class StaleIndexError(DaliBackendError):
    """Files changed, vanished or were replaced since the index was built."""


class BadImageError(DaliBackendError):
    """A sample could not be read or decoded at load time.

    Attributes:
        path: absolute path of the file.
        index: position of the sample in the SampleIndex.
        label: class id of the sample.
        epoch: epoch in which the draw happened (None for a plain integer index).
        reason: what is wrong with the file.
    """

    def __init__(self, path: str, index: int | None = None, label: int | None = None, epoch: int | None = None,
                 reason: str | None = None):
        self.path, self.index, self.label, self.epoch, self.reason = path, index, label, epoch, reason
        if index is None:  # rebuilt from a message (torch re-raises worker errors as exc_type(message))
            super().__init__(path)
            return
        where = f"sample {index} (label {label}" + (f", epoch {epoch})" if epoch is not None else ")")
        if "://" in path and str(reason).startswith("unreadable"):  # the object may be fine: the network was not
            fix = ("Check that the storage is reachable (the read was retried with backoff) and run again, or pass "
                   "on_error='skip' to replace draws that cannot be read.")
        else:
            fix = ("Fix or remove the file and rebuild the index (SampleIndex.from_folder / from_manifest), or pass "
                   "on_error='skip' to replace bad draws.")
        super().__init__(f"{path}: {reason} [{where}]. {fix}")


class StorageError(DaliBackendError, OSError):
    """Object storage could not be read (after the retries): the message names the object's URL and the
    reason (HTTP status, S3 error code, connection refused, timed out), never a credential."""


class MissingDependencyError(DaliBackendError, ImportError):
    """An optional package needed for the requested backend is not installed."""


class LoaderWorkerError(DaliBackendError, RuntimeError):
    """A worker process of a loader died (killed, crashed, out of memory); the loader cannot continue."""


class LoaderClosedError(DaliBackendError, RuntimeError):
    """A loader (or an iterator of it) was used after ``close()``."""


class LoaderTimeoutError(DaliBackendError, RuntimeError):
    """No batch arrived within the loader's ``timeout`` (DataLoader's argument of that name)."""


class StaleIteratorError(LoaderClosedError):
    """An iterator of a loader was used after a newer pass over the same loader began."""


class OutputFileError(DaliBackendError, OSError):
    """A file could not be written: its path is a folder, FIFO, socket or device (never replaced), or the
    write failed (disk full, permissions). The message names the path; nothing was left behind."""


class FallbackWarning(UserWarning):
    """``DaliLoader(device="auto")`` runs without the GPU (no CUDA, or DALI missing): said once per reason
    and process; pass the backend explicitly to choose the fallback on purpose."""


class ColorDroppedWarning(UserWarning):
    """The spec decodes gray by default (the preset without ``color=``) and the index holds colour JPEGs:
    said once per index; pass ``color="rgb"`` to keep the colour, or ``color="gray"`` to mean gray."""


class FilesNotIndexedWarning(UserWarning):
    """An index was built without some of the files under its root (rejected for their content, or
    ignored for their extension): said at build time with the count per class; ``summary()`` lists them."""


class ExecutorFailed(Exception):
    """An executor's ``run`` failed in a way its ``recover`` can repair; then the facade resumes the pass."""
