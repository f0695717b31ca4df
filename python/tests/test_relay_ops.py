"""Every operation of the relay's local protocol (version 1) from Python, and the relay's error
codes for bad input, raised as LaminarError with the relay's code."""

from __future__ import annotations

import os

import numpy as np
import pytest
from safetensors.numpy import save_file

from laminar import ClosedError, LaminarError, LaminarTimeoutError, RelayClient, RelayError, error_codes
from laminar.relay import default_socket_path
from laminar.relay.connection import FrameConnection

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def relay(module_relay):
    """The module's relay, shared by its cases (conftest.py's module_relay), each under a model
    name of its own (``model``); the cases that count the relay's leases and versions, or change
    its options, start their own."""
    return module_relay


@pytest.fixture
def model(model_name):
    return model_name


@pytest.fixture
def client(relay):
    with RelayClient(relay.socket_path, name="ops test") as c:
        yield c


@pytest.fixture
def own_client(relay_factory):
    """A client of a relay of the case's own, for a case that reads relay-wide counts."""
    with RelayClient(relay_factory().socket_path, name="ops test") as c:
        yield c


def small(value: float = 1.0) -> dict:
    return {"w": np.full((4, 3), value, np.float32), "b": np.arange(5, dtype=np.int64)}


def code_of(fn, *args, **kwargs) -> str:
    with pytest.raises(LaminarError) as info:
        fn(*args, **kwargs)
    return info.value.code


class TestOperations:
    def test_hello_tells_who_the_relay_is(self, client, relay):
        assert client.relay_id
        assert client.shm_dir == relay.shm_dir
        assert client.chunk_size == 32 * 1024 * 1024
        # hello again on the same connection is answered too
        again = client.request("hello", protocol=1, client="again")
        assert again["protocol"] == 1 and again["relay"] == client.relay_id and again["maxFrameBytes"] > 0

    def test_begin_written_commit_acquire_release(self, own_client, model):
        pub = own_client.begin(model, 1, [("w", "F32", [4, 3]), ("b", np.int64, (5,))], metadata={"step": "1"})
        assert pub.owner and ".safetensors" in pub.segment and list(pub.tensors) == ["w", "b"]
        pub.write_many(small(2.0))
        committed = pub.commit().wait_visible(timeout=60)
        assert committed["version"] == 1 and len(committed["checksums"]) == 1
        with own_client.acquire(model) as lease:
            assert lease.version == 1 and lease.metadata == {"step": "1"}
            assert own_client.status()["leases"] == 1
            assert (lease.numpy("w") == 2.0).all()
            assert lease.numpy("b").tolist() == [0, 1, 2, 3, 4]
        assert own_client.status()["leases"] == 0

    def test_written_reports_go_out_at_flush(self, client, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3]), ("b", "I64", [5])])
        pub.write("w", small()["w"])
        pub.flush()
        # the relay counts w as written: a commit now misses only b, and the relay keeps the
        # version writing (asked over the protocol: the client's commit aborts a refused version)
        err = code_of(client.request, "commit", model=model, version=1)
        assert err == error_codes.INCOMPLETE
        pub.write("b", small()["b"])
        pub.commit().wait_visible(timeout=60)

    def test_attach_lets_a_second_writer_fill_its_tensors(self, client, relay, model):
        pub = client.begin(model, 3, [("w", "F32", [4, 3]), ("b", "I64", [5])])
        with RelayClient(relay.socket_path, name="rank 1") as rank1:
            with rank1.attach(pub.segment) as part:
                assert not part.owner
                part.write("b", small()["b"])
                assert code_of(part.commit) == error_codes.NOT_OWNER  # only the owner commits
            pub.write("w", small()["w"])
            pub.commit().wait_visible(timeout=60)
            with rank1.acquire(model, version=3) as lease:
                assert lease.numpy("b").tolist() == [0, 1, 2, 3, 4]

    def test_abort_drops_the_version(self, client, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3])])
        pub.abort()
        assert [v for v in client.status()["versions"] if v["model"] == model] == []
        # the same version may be begun again
        client.publish(model, 1, {"w": small()["w"]})

    def test_adopt_reads_a_safetensors_file_with_progress(self, client, tmp_path, model):
        path = os.path.join(tmp_path, "ckpt.safetensors")
        save_file({"x": np.arange(8, dtype=np.float32), "y": np.ones((2, 2), np.float64)}, path)
        progress = []
        description = client.publish_file(path, model, 5, on_progress=lambda done, total: progress.append((done, total)))
        assert description["version"] == 5
        assert progress and progress[-1][0] == progress[-1][1]
        with client.acquire(model, version=5) as lease:
            assert lease.numpy("x").tolist() == list(range(8))

    def test_acquire_waits_for_a_version(self, client, relay, model):
        client.publish(model, 1, small())
        with RelayClient(relay.socket_path) as trainer:
            # the acquire below is answered when version 2 completes, not before
            future = client._live().connection.request_future("acquire", {"model": model, "atLeast": 2, "timeoutMs": 60_000})
            assert not future.done()
            trainer.publish(model, 2, small(3.0))
            result = future.result(60)
            assert result["version"] == 2
            client.request("release", lease=result["lease"])

    def test_acquire_gives_up_after_its_timeout(self, client, model):
        client.publish(model, 1, small()).wait_visible(timeout=60)
        assert code_of(client.acquire, model, at_least=2, timeout=0.05) == error_codes.TIMEOUT

    def test_an_acquire_timeout_is_a_timeout_error(self, client, model):
        # The relay answers ERR_TIMEOUT; it is the class the code has on every path (the
        # sampler's too): a builtin TimeoutError and a LaminarTimeoutError.
        client.publish(model, 1, small()).wait_visible(timeout=60)
        with pytest.raises(TimeoutError) as info:
            client.acquire(model, at_least=2, timeout=0.05)
        assert isinstance(info.value, LaminarTimeoutError) and info.value.code == error_codes.TIMEOUT

    def test_watch_and_unwatch(self, client, model):
        watch = client.request("watch", model=model)["watch"]
        assert client.request("unwatch", watch=watch) is None

    def test_status(self, own_client, model):
        own_client.publish(model, 1, small()).wait_visible(timeout=60)
        status = own_client.status()
        assert status["connections"] >= 1 and status["leases"] == 0
        [v] = status["versions"]
        assert (v["model"], v["version"], v["state"]) == (model, 1, "complete")

    def test_plan_needs_a_relay_in_a_broadcast(self, client):
        assert code_of(client.set_plan, {"epoch": 1, "relays": []}) == error_codes.NO_BROADCAST


class TestRelayErrors:
    def test_unknown_tensor(self, client, model):
        client.begin(model, 1, [("w", "F32", [4, 3])])
        err = code_of(client.request, "written", model=model, version=1, tensors=[{"name": "nope", "checksum": "0" * 16}])
        assert err == error_codes.UNKNOWN_TENSOR

    def test_unknown_tensor_in_a_lease_or_publication(self, client, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3])])
        assert code_of(pub.write, "nope", small()["w"]) == error_codes.UNKNOWN_TENSOR
        pub.write("w", small()["w"])
        pub.commit().wait_visible(timeout=60)
        with client.acquire(model) as lease:
            assert code_of(lease.numpy, "nope") == error_codes.UNKNOWN_TENSOR

    def test_bad_dtype(self, client, model):
        assert code_of(client.begin, model, 1, [("w", "F7", [4])]) == error_codes.BAD_DTYPE

    def test_bad_shape(self, client, model):
        assert code_of(client.begin, model, 1, [("w", "F32", [-1])]) == error_codes.BAD_SHAPE

    def test_duplicate_tensor(self, client, model):
        assert code_of(client.begin, model, 1, [("w", "F32", [1]), ("w", "F32", [1])]) == error_codes.DUPLICATE_TENSOR

    def test_bad_model_id(self, client):
        assert code_of(client.begin, "", 1, [("w", "F32", [1])]) == error_codes.BAD_MODEL_ID
        assert code_of(client.acquire, "bad\x01id") == error_codes.BAD_MODEL_ID

    def test_version_exists(self, client, model):
        client.publish(model, 1, small())
        assert code_of(client.publish, model, 1, small()) == error_codes.VERSION_EXISTS

    def test_bad_version(self, client, model):
        assert code_of(client.begin, model, -1, [("w", "F32", [1])]) == error_codes.BAD_VERSION
        assert code_of(client.begin, model, 1.5, [("w", "F32", [1])]) == error_codes.BAD_VERSION

    def test_an_older_version_is_not_stale_locally(self, client, model):
        # ERR_VERSION_STALE belongs to the peer protocol (a relay declining an older version
        # offered by another relay); locally a writer may still publish an older version.
        client.publish(model, 5, small()).wait_visible(timeout=60)
        client.publish(model, 4, small()).wait_visible(timeout=60)
        with client.acquire(model) as lease:
            assert lease.version == 5

    def test_unknown_lease(self, client):
        assert code_of(client.request, "release", lease=999) == error_codes.UNKNOWN_LEASE

    def test_unknown_model_and_version(self, client, model):
        assert code_of(client.acquire, "org/none") == error_codes.UNKNOWN_MODEL
        client.publish(model, 1, small())
        assert code_of(client.acquire, model, version=9) == error_codes.UNKNOWN_VERSION

    def test_incomplete(self, client, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3])])
        # commit() returns once sent; the relay's refusal comes with the verdict
        assert code_of(pub.commit().wait_visible, 60) == error_codes.INCOMPLETE

    def test_checksum_mismatch(self, client, model):
        client.begin(model, 1, [("w", "F32", [4, 3])])
        client.request("written", model=model, version=1, tensors=[{"name": "w", "checksum": "0123456789abcdef"}])
        assert code_of(client.request, "commit", model=model, version=1) == error_codes.CHECKSUM_MISMATCH

    def test_not_owner_on_the_relay(self, client, relay, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3])])
        pub.write("w", small()["w"])
        pub.flush()
        with RelayClient(relay.socket_path) as other:
            assert code_of(other.request, "commit", model=model, version=1) == error_codes.NOT_OWNER

    def test_not_writing(self, client, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3])])
        pub.write("w", small()["w"])
        pub.commit()
        assert code_of(pub.write, "w", small()["w"]) == error_codes.NOT_WRITING
        assert code_of(client.request, "abort", model=model, version=1) == error_codes.NOT_WRITING

    def test_bad_segment_name(self, client):
        assert code_of(client.attach, "../../etc/passwd") == error_codes.BAD_SEGMENT_NAME

    def test_bad_request_and_unknown_op(self, client):
        assert code_of(client.request, "acquire", model=5) == error_codes.BAD_REQUEST
        assert code_of(client.request, "teleport") == error_codes.UNKNOWN_OP
        # the connection stays after a bad request
        assert client.status()["connections"] >= 1

    def test_the_relays_errors_are_relay_errors(self, client):
        with pytest.raises(RelayError) as info:
            client.request("release", lease=1)
        assert info.value.code == error_codes.UNKNOWN_LEASE and "lease" in info.value.message

    def test_a_tensor_of_the_wrong_size_or_dtype(self, client, model):
        pub = client.begin(model, 1, [("w", "F32", [4, 3])])
        assert code_of(pub.write, "w", np.zeros(5, np.float32)) == error_codes.BAD_TENSOR
        assert code_of(pub.write, "w", np.zeros((4, 3), np.int32)) == error_codes.BAD_TENSOR
        pub.write("w", np.zeros((4, 3), np.float32).tobytes())  # raw bytes of the right size fit
        pub.commit()


class TestHandshake:
    def test_a_client_speaking_another_protocol_is_refused_and_disconnected(self, relay):
        connection = FrameConnection.connect(relay.socket_path)
        try:
            with pytest.raises(RelayError) as info:
                connection.request("hello", {"protocol": 2}, timeout=30)
            assert info.value.code == error_codes.PROTOCOL_VERSION
            with pytest.raises(ClosedError):
                connection.request("hello", {"protocol": 1}, timeout=30)
        finally:
            connection.close()

    def test_the_first_request_must_be_hello(self, relay):
        connection = FrameConnection.connect(relay.socket_path)
        try:
            with pytest.raises(LaminarError) as info:
                connection.request("status", {}, timeout=30)
            assert info.value.code == error_codes.HANDSHAKE_REQUIRED
            assert connection.closed
        finally:
            connection.close()

    def test_garbage_gets_an_error_frame_and_the_connection_closes(self, relay):
        connection = FrameConnection.connect(relay.socket_path)
        try:
            closed = []
            connection.on_closed(closed.append)
            connection._sock.sendall(b"\0\0\0\x01\xc1")  # a frame whose payload is not msgpack
            connection._reader.join(30)
            assert closed and closed[0].code == error_codes.BAD_FRAME
        finally:
            connection.close()

    def test_the_relay_refuses_an_oversized_frame(self, relay_factory):
        relay = relay_factory(["--no-pin", "--max-frame", "64KiB"])
        connection = FrameConnection.connect(relay.socket_path, max_frame_bytes=1 << 20)
        try:
            connection.request("hello", {"protocol": 1}, timeout=30)
            with pytest.raises(LaminarError) as info:
                connection.request("status", {"pad": "x" * (100 << 10)}, timeout=30)
            assert info.value.code == error_codes.FRAME_TOO_LARGE
        finally:
            connection.close()

    def test_no_relay_is_a_closed_error(self, tmp_path):
        with pytest.raises(ClosedError) as info:
            RelayClient(str(tmp_path / "none.sock"))
        assert info.value.code == error_codes.CLOSED

    def test_a_socket_path_too_long_is_an_invalid_argument(self):
        with pytest.raises(LaminarError) as info:
            RelayClient("/tmp/" + "x" * 200)
        assert info.value.code == error_codes.INVALID_ARG


class TestDefaultSocket:
    """A client given no socket finds the relay where the relay CLI puts it: LAMINAR_RELAY_SOCKET,
    else relay.sock in LAMINAR_SHM_DIR (the deploy files set it for relay and clients), else in
    /dev/shm/laminar; an explicit socket wins over both."""

    def test_the_precedence(self, monkeypatch):
        monkeypatch.delenv("LAMINAR_RELAY_SOCKET", raising=False)
        monkeypatch.delenv("LAMINAR_SHM_DIR", raising=False)
        assert default_socket_path() == "/dev/shm/laminar/relay.sock"
        monkeypatch.setenv("LAMINAR_SHM_DIR", "/mnt/shm")
        assert default_socket_path() == "/mnt/shm/relay.sock"
        monkeypatch.setenv("LAMINAR_RELAY_SOCKET", "/run/r.sock")
        assert default_socket_path() == "/run/r.sock"

    def test_a_client_with_the_relays_shm_dir_finds_it(self, relay, monkeypatch):
        # The relay's socket is <root>/relay.sock: what `LAMINAR_SHM_DIR=<root> laminar relay` makes.
        monkeypatch.delenv("LAMINAR_RELAY_SOCKET", raising=False)
        monkeypatch.setenv("LAMINAR_SHM_DIR", os.path.dirname(relay.socket_path))
        with RelayClient(name="env test", reconnect=False) as c:
            assert c.socket_path == relay.socket_path
            assert c.status()["connections"] >= 1
        monkeypatch.setenv("LAMINAR_RELAY_SOCKET", os.path.join(os.path.dirname(relay.socket_path), "nobody-here.sock"))
        with pytest.raises(ClosedError):
            RelayClient(reconnect=False)
        with RelayClient(relay.socket_path, reconnect=False) as c:
            assert c.socket_path == relay.socket_path
