"""Every decision of the storage client (dali_backend/storage/client.py) pinned with made-up inputs on
each side of it: the retry budget, the backoff and its cap, which answers are retried, which mean
"missing" or "changed", and the response's ETag against the one asked for. No server: a fake client
raises botocore-shaped errors (``.response`` dicts, transport exception names) or answers."""

from __future__ import annotations

import io
import os

import pytest

from dali_backend.errors import StorageError
from dali_backend.storage import client as client_mod
from dali_backend.storage.client import (DEFAULT_RETRIES, Bucket, ObjectChanged, ObjectMissing, Unreachable,
                                         _describe)


class ClientError(Exception):
    """What botocore raises when the server answered: the parsed answer in ``response``."""

    def __init__(self, status: int, code: str = ""):
        super().__init__(f"An error occurred ({code or status})")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


class EndpointConnectionError(Exception):
    pass


class ReadTimeoutError(Exception):
    pass


class ConnectionClosedError(Exception):
    pass


def bucket_with(fake, monkeypatch, **options) -> tuple[Bucket, list[float]]:
    """A Bucket whose client is ``fake`` in this process, and the list its backoff waits go to."""
    bucket = Bucket("s3://bucket/pre", {"backoff_s": 0.1, "max_backoff_s": 0.5, **options})
    bucket._client, bucket._pid = fake, os.getpid()
    waits: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", waits.append)
    monkeypatch.setattr(client_mod._jitter, "uniform", lambda lo, hi: hi)  # the top of each jitter window
    return bucket, waits


def failing(times: int, error: Exception):
    calls = []

    def fn(client):
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "ok"
    return fn, calls


@pytest.mark.parametrize("retries", [0, 2, DEFAULT_RETRIES])
def test_the_retry_budget_is_retries_plus_one_attempts(monkeypatch, retries):
    bucket, _ = bucket_with(object(), monkeypatch, retries=retries)
    fn, calls = failing(retries, ClientError(503, "SlowDown"))  # fails as often as there are retries: succeeds
    assert bucket._call("k.jpg", "GET", fn) == "ok" and len(calls) == retries + 1
    fn, calls = failing(retries + 1, ClientError(503, "SlowDown"))  # one failure more: given up
    with pytest.raises(Unreachable, match=r"s3://bucket/pre/k.jpg: GET failed.*HTTP 503 SlowDown"):
        bucket._call("k.jpg", "GET", fn)
    assert len(calls) == retries + 1


def test_the_backoff_doubles_from_its_first_wait_up_to_its_cap(monkeypatch):
    bucket, waits = bucket_with(object(), monkeypatch, retries=6)
    fn, _ = failing(6, ClientError(500, "InternalError"))
    bucket._call("k.jpg", "GET", fn)
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5, 0.5])  # 0.8 and above: capped at max_backoff_s
    assert client_mod.DEFAULT_BACKOFF_S == 0.1 and client_mod.DEFAULT_MAX_BACKOFF_S == 2.0


RETRIED = [ClientError(s) for s in (429, 500, 502, 503, 504)] + [
    ClientError(400, "RequestTimeout"), ClientError(400, "SlowDown"), ClientError(403, "RequestTimeTooSkewed"),
    EndpointConnectionError("Could not connect to the endpoint URL"), ReadTimeoutError("Read timed out."),
    ConnectionClosedError("Connection was closed"), ConnectionResetError(104, "reset")]
NOT_RETRIED = [ClientError(s) for s in (400, 401, 403, 405, 409, 416, 501)] + [
    ClientError(403, "AccessDenied"), ValueError("bad argument")]


@pytest.mark.parametrize("error", RETRIED, ids=repr)
def test_transient_answers_are_retried_then_unreachable(monkeypatch, error):
    assert _describe(error, ())[2] is True
    bucket, waits = bucket_with(object(), monkeypatch, retries=2)
    fn, calls = failing(10, error)
    with pytest.raises(Unreachable):
        bucket._call("k.jpg", "GET", fn)
    assert len(calls) == 3 and len(waits) == 2


@pytest.mark.parametrize("error", NOT_RETRIED, ids=repr)
def test_other_answers_fail_at_once_and_are_not_unreachable(monkeypatch, error):
    assert _describe(error, ())[2] is False
    bucket, waits = bucket_with(object(), monkeypatch, retries=5)
    fn, calls = failing(10, error)
    with pytest.raises(StorageError) as e:
        bucket._call("k.jpg", "GET", fn)
    assert not isinstance(e.value, (Unreachable, ObjectMissing, ObjectChanged))
    assert len(calls) == 1 and waits == []


@pytest.mark.parametrize("error, kind", [(ClientError(404, "NoSuchKey"), ObjectMissing),
                                         (ClientError(404), ObjectMissing),
                                         (ClientError(412, "PreconditionFailed"), ObjectChanged)])
def test_missing_and_changed_are_told_apart_and_not_retried(monkeypatch, error, kind):
    bucket, waits = bucket_with(object(), monkeypatch)
    fn, calls = failing(10, error)
    with pytest.raises(kind):
        bucket._call("k.jpg", "GET", fn)
    assert len(calls) == 1 and waits == []


class FakeS3:
    """``get_object`` answering ``etag`` whatever was asked (a store or gateway that ignores If-Match)."""

    def __init__(self, etag: str, body: bytes = b"\xff\xd8data\xff\xd9"):
        self.etag, self.body, self.asked = etag, body, []

    def get_object(self, **args):
        self.asked.append(args)
        return {"Body": io.BytesIO(self.body), "ETag": self.etag}


@pytest.mark.parametrize("served, ok", [('"abc"', True), ('W/"abc"', True), ('"abd"', False), ('"abc-2"', False),
                                        ("", True)])
def test_the_response_etag_is_compared_with_the_one_asked_for(monkeypatch, served, ok):
    fake = FakeS3(served)
    bucket, _ = bucket_with(fake, monkeypatch)
    if ok:  # equal (a weak marker aside), or a server that sends none: If-Match is all there is
        assert bucket.get("k.jpg", '"abc"', 0, 4)[0] == fake.body
    else:
        with pytest.raises(ObjectChanged, match=r'ETag "abc" asked, .* served'):
            bucket.get("k.jpg", '"abc"', 0, 4)
    assert all(a["IfMatch"] == '"abc"' and a["Range"] == "bytes=0-3" for a in fake.asked)
    fake.asked.clear()
    assert bucket.get("k.jpg")[0] == fake.body and "IfMatch" not in fake.asked[0]  # no ETag: nothing to compare


# ------------------------------------------------------------------------------ indexing: unreachable is not bad
def test_a_patient_bucket_has_the_factor_times_the_retries_and_cap():
    bucket = Bucket("s3://bucket", {"retries": 4, "max_backoff_s": 0.5})
    patient = bucket.patient(3)
    assert patient.retries == 12 and patient.options["max_backoff_s"] == 1.5 and patient.root == bucket.root
    assert Bucket("s3://bucket", {"retries": 0}).patient(3).retries == 3  # a second round even without retries
    assert Bucket("s3://bucket").patient(3).options["max_backoff_s"] == 3 * client_mod.DEFAULT_MAX_BACKOFF_S


FAST = {"retries": 2, "backoff_s": 0.001, "max_backoff_s": 0.002}  # 3 attempts, then 3 * 2 + 1 = 7 more


@pytest.mark.parametrize("faults, indexed", [(9, True), (10, False)])
def test_objects_answering_only_503_while_indexing_are_retried_then_an_error_never_rejected(s3, tmp_path, faults,
                                                                                              indexed, caplog):
    """Issue 32 case 3: before, an object that answered only 503 past the retry budget was filed among the
    rejected files and the build succeeded. Now: a second, longer round; still unreachable -> StorageError."""
    from tests.helpers import jpeg_bytes, write
    from dali_backend import SampleIndex
    from tests.storage.test_storage import upload

    for k in range(4):
        write(tmp_path / "d" / ("a" if k < 2 else "b") / f"{k}.jpg", jpeg_bytes(seed=k))
    url = upload(s3, tmp_path / "d", f"flaky-{faults}")
    s3.proxy.configure(faults=[{"status": 503, "code": "SlowDown", "count": faults, "match": "b/3.jpg"}])
    try:
        if indexed:  # 3 + 7 attempts: the 10th is answered
            index = SampleIndex.from_folder(url, progress=False, storage_options=FAST)
            assert "b/3.jpg" in list(index.paths) and not index.rejected
            assert "answered only transient failures while indexing" in caplog.text
        else:
            with pytest.raises(StorageError) as e:
                SampleIndex.from_folder(url, progress=False, storage_options=FAST)
            assert "1 object could not be read while indexing" in str(e.value) and "b/3.jpg" in str(e.value)
            assert "HTTP 503 SlowDown" in str(e.value) and "not bad files" in str(e.value)
    finally:
        s3.proxy.configure()
