# Copyright: krops developers
# Apache License 2.0 (see LICENSE)
"""cloud_teardown.Http, the ARM and Google REST client, against the HTTP doubles: one retry policy that
honours Retry-After and otherwise waits with full jitter, and a write that stalls or is cut short is
handled as a read is (retried, then a clean CloudError naming the call), never an unexpected exception."""

from __future__ import annotations

import time

import pytest

from ansible_collections.krops.platform.plugins.module_utils import cloud_teardown as ct
from tests.substrate.arm_double import ArmDouble
from tests.substrate.http_double import Reply

GROUP = "/subscriptions/00000000-0000-0000-0000-000000000001/resourceGroups/rg-a?api-version=2021-04-01"


class ThrottlingArm(ArmDouble):
    """ARM that answers the first `throttle` calls with 429 (and the Retry-After it is given)."""

    def __init__(self, throttle, retry_after=None, status=429, stall=0.0, cut_short=0, **kwargs):
        self.throttle = throttle
        self.retry_after = retry_after
        self.status = status
        self.stall = stall  # seconds the first `throttle` calls hang before answering
        self.cut_short = cut_short  # calls answered with fewer body bytes than Content-Length says
        self.seen = 0
        super().__init__(**kwargs)

    def respond(self, request):
        self.seen += 1
        if self.seen <= self.throttle:
            if self.stall:
                time.sleep(self.stall)
            else:
                headers = {"Retry-After": self.retry_after} if self.retry_after is not None else {}
                return Reply(self.status, {"error": {"code": "TooManyRequests", "message": "slow down"}}, headers)
        if self.seen <= self.cut_short:
            return _ShortReply(200, b'{"id": "x"')
        return super().respond(request)


class _ShortReply(Reply):
    def encoded(self):
        return self.body


@pytest.fixture
def recorder():
    waits = []
    return waits


def http(double, waits, **kwargs):
    client = ct.Http("arm-token", sleep=waits.append, what="ARM", **kwargs)
    client.base = double.url
    return client


def test_retry_after_seconds_is_honoured(recorder):
    arm = ThrottlingArm(throttle=2, retry_after="7")
    try:
        arm.add_group("rg-a")
        status, body = http(arm, recorder).request("GET", arm.url + GROUP)
    finally:
        arm.stop()
    assert status == 200 and body["name"] == "rg-a"
    assert recorder == [7.0, 7.0]
    assert arm.seen == 3


def test_retry_after_as_an_http_date_and_its_cap():
    assert ct.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)
    assert ct.parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412490.0) == 0.0
    assert ct.parse_retry_after("soon") is None and ct.parse_retry_after(None) is None
    assert ct.RetryPolicy(retry_after_cap=60).delay(0, "3600") == 60


def test_without_retry_after_the_wait_is_full_jitter(recorder):
    draws = []

    def rand(low, high):
        draws.append((low, high))
        return high / 2

    arm = ThrottlingArm(throttle=3, status=503)
    try:
        arm.add_group("rg-a")
        client = http(arm, recorder, policy=ct.RetryPolicy(attempts=5, base=1.0, cap=3.0, rand=rand))
        assert client.request("GET", arm.url + GROUP)[0] == 200
    finally:
        arm.stop()
    # uniform(0, min(cap, base * 2**attempt)) for attempts 0, 1, 2.
    assert draws == [(0, 1.0), (0, 2.0), (0, 3.0)]
    assert recorder == [0.5, 1.0, 1.5]


def test_throttling_past_the_budget_fails_naming_the_call(recorder):
    arm = ThrottlingArm(throttle=10, retry_after="1")
    try:
        with pytest.raises(ct.CloudError) as err:
            http(arm, recorder, retries=2).request("DELETE", arm.url + GROUP)
    finally:
        arm.stop()
    assert str(err.value) == f"DELETE {arm.url}{GROUP.split('?', maxsplit=1)[0]} answered 429: slow down"
    assert arm.seen == 3 and recorder == [1.0, 1.0]


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_stalled_call_is_retried_then_fails_cleanly_reads_and_writes_alike(recorder, method):
    arm = ThrottlingArm(throttle=10, stall=1.0)
    try:
        client = http(arm, recorder, timeout=0.3, retries=1)
        body = {"location": "swedencentral"} if method == "PUT" else None
        with pytest.raises(ct.CloudError) as err:
            client.request(method, arm.url + GROUP, body=body)
    finally:
        arm.stop()
    assert (
        str(err.value)
        == f"{method} {arm.url}{GROUP.split('?', maxsplit=1)[0]} failed: timed out (after 2 attempts, 0.3s timeout each)"
    )
    assert len(client.calls) == 2 and len(recorder) == 1


@pytest.mark.parametrize("method", ["GET", "PUT"])
def test_an_answer_that_is_not_json_fails_cleanly(recorder, method):
    arm = ThrottlingArm(throttle=0, cut_short=1)
    try:
        body = {"location": "swedencentral"} if method == "PUT" else None
        with pytest.raises(ct.CloudError) as err:
            http(arm, recorder).request(method, arm.url + GROUP, body=body)
    finally:
        arm.stop()
    assert str(err.value) == (
        f'{method} {arm.url}{GROUP.split("?", maxsplit=1)[0]} answered 200 with a body that is not JSON: {{"id": "x"'
    )


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_an_answer_cut_short_is_retried_then_fails_cleanly(recorder, method):
    """The connection closes before the Content-Length is read (http.client.IncompleteRead, which is no
    OSError): retried like a timeout, then a CloudError, for reads and writes alike."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    served = []

    def serve():
        while True:
            try:
                conn, _addr = server.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"id":')
            conn.close()
            served.append(1)

    threading.Thread(target=serve, daemon=True).start()
    url = "http://127.0.0.1:%d/x" % server.getsockname()[1]
    try:
        with pytest.raises(ct.CloudError) as err:
            ct.Http("t", sleep=recorder.append, retries=1).request(method, url)
    finally:
        server.close()
    assert str(err.value) == (
        f"{method} {url} failed: IncompleteRead(6 bytes read, 34 more expected) (after 2 attempts, 60s timeout each)"
    )
    assert len(served) == 2 and len(recorder) == 1
