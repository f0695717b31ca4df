"""Leases: zero-copy read-only numpy and torch views of the relay's memory, every dtype, and
what release does with views still alive."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

from laminar import LaminarError, RelayClient, error_codes

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def client(relay):
    with RelayClient(relay.socket_path) as c:
        yield c


def mapped(path: str) -> bool:
    """Whether this process maps the file at ``path`` now."""
    with open("/proc/self/maps") as maps:
        return any(line.rstrip().endswith(path) for line in maps)


def base_address(lease) -> int:
    return np.frombuffer(lease._mapping, np.uint8).ctypes.data


# Every dtype, with values that tell the bytes apart. A 3-byte tensor first puts the others at
# offsets that are not multiples of their element size (safetensors packs tensors).
TENSORS = {
    "odd": np.array([1, 2, 3], np.uint8),
    "bool": np.array([True, False, True]),
    "i8": np.array([-128, 0, 127], np.int8),
    "i16": np.array([-32768, 7, 32767], np.int16),
    "u16": np.array([0, 1, 65535], np.uint16),
    "f16": np.array([0.5, -2.0, 65504.0], np.float16),
    "i32": np.arange(-5, 5, dtype=np.int32).reshape(2, 5),
    "u32": np.array([0, 2**32 - 1], np.uint32),
    "f32": np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4),
    "i64": np.array([-(2**63), 2**63 - 1], np.int64),
    "u64": np.array([0, 2**64 - 1], np.uint64),
    "f64": np.array([np.pi, -np.e], np.float64),
    "scalar": np.array(42.0, np.float32),
    "empty": np.zeros((0, 3), np.float32),
}


def publish_every_dtype(client) -> None:
    tensors = dict(TENSORS)
    tensors["bf16"] = torch.tensor([1.0, -2.5, 3.0e38], dtype=torch.bfloat16)
    # float8 as raw bits (this torch may lack float8): the dtype comes from the spec.
    specs = [(name, t.dtype, t.shape) for name, t in tensors.items()] + [("f8", "F8_E4M3", [4])]
    pub = client.begin("org/dtypes", 1, specs)
    pub.write_many(tensors)
    pub.write("f8", np.array([0x38, 0x40, 0xB8, 0x7E], np.uint8))
    pub.commit().wait_visible(timeout=60)


class TestNumpyViews:
    def test_every_dtype_reads_back_equal(self, client):
        publish_every_dtype(client)
        with client.acquire("org/dtypes") as lease:
            views = lease.numpy()
            for name, expected in TENSORS.items():
                assert views[name].dtype == expected.dtype, name
                assert views[name].shape == expected.shape, name
                assert np.array_equal(views[name], expected), name
            assert views["bf16"].dtype == np.uint16
            bits = torch.tensor([1.0, -2.5, 3.0e38], dtype=torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
            assert views["bf16"].tolist() == bits.tolist()
            assert views["f8"].dtype == np.uint8 and views["f8"].tolist() == [0x38, 0x40, 0xB8, 0x7E]
            del views

    def test_views_are_the_shared_memory_itself_and_read_only(self, client):
        publish_every_dtype(client)
        with client.acquire("org/dtypes") as lease:
            base = base_address(lease)
            for name, info in lease.tensors.items():
                view = lease.numpy(name)
                if info.byte_length:
                    assert view.ctypes.data == base + info.offset, name
                assert not view.flags.writeable
            with pytest.raises(ValueError):
                lease.numpy("f32")[0, 0] = 1.0
            del view


class TestTorchViews:
    def test_every_dtype_as_torch(self, client):
        publish_every_dtype(client)
        with client.acquire("org/dtypes") as lease:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # no "buffer is not writable" warning escapes
                tensors = lease.torch()
            assert tensors["bf16"].dtype == torch.bfloat16
            assert torch.equal(tensors["bf16"], torch.tensor([1.0, -2.5, 3.0e38], dtype=torch.bfloat16))
            assert torch.equal(tensors["f32"], torch.from_numpy(TENSORS["f32"]))
            assert tensors["bool"].dtype == torch.bool and tensors["bool"].tolist() == [True, False, True]
            assert tensors["i64"].tolist() == TENSORS["i64"].tolist()
            assert tensors["scalar"].shape == () and tensors["scalar"].item() == 42.0
            assert tensors["empty"].shape == (0, 3)
            f8 = getattr(torch, "float8_e4m3fn", torch.uint8)
            assert tensors["f8"].dtype == f8
            base = base_address(lease)
            assert tensors["f32"].data_ptr() == base + lease.info("f32").offset
            assert lease.tensor("f64").tolist() == TENSORS["f64"].tolist()
            del tensors


class TestRelease:
    def test_release_without_views_unmaps_at_once(self, client):
        client.publish("org/m", 1, {"w": np.ones(1000, np.float32)}).wait_visible(timeout=60)
        lease = client.acquire("org/m")
        assert mapped(lease.path)
        lease.release()
        assert not mapped(lease.path)
        assert client.status()["leases"] == 0
        assert lease.released
        lease.release()  # twice: nothing

    def test_views_alive_at_release_keep_the_mapping_until_they_go(self, client):
        client.publish("org/m", 1, {"w": np.arange(1000, dtype=np.float32)}).wait_visible(timeout=60)
        lease = client.acquire("org/m")
        view = lease.numpy("w")
        lease.release()  # mmap.close() refuses while the view exports it: left to the GC
        assert client.status()["leases"] == 0
        assert mapped(lease.path)
        del view
        gc.collect()
        assert not mapped(lease.path)

    def test_a_released_lease_gives_no_views(self, client):
        client.publish("org/m", 1, {"w": np.ones(4, np.float32)}).wait_visible(timeout=60)
        lease = client.acquire("org/m")
        lease.release()
        with pytest.raises(LaminarError) as info:
            lease.numpy()
        assert info.value.code == error_codes.MAPPING_CLOSED

    def test_verify_reads_every_chunk_again(self, client):
        client.publish("org/m", 1, {"w": np.arange(100_000, dtype=np.float32)}, chunk_size=65536).wait_visible(timeout=60)
        with client.acquire("org/m") as lease:
            assert len(lease.checksums) == 7
            lease.verify()
            lease.checksums[3] = "0" * 16
            with pytest.raises(LaminarError) as info:
                lease.verify()
            assert info.value.code == error_codes.CHECKSUM_MISMATCH and info.value.details == {"chunks": [3]}


# -- page-locking for CUDA (Lease.register_cuda) -----------------------------------------------


def test_register_cuda_without_a_device_is_refused_and_the_lease_still_serves(client, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    client.publish("org/pin", 1, {"w": np.arange(1000, dtype=np.float32)}).wait_visible(timeout=30)
    lease = client.acquire("org/pin", version=1)
    with pytest.raises(LaminarError) as refused:
        lease.register_cuda()
    assert refused.value.code == error_codes.CUDA_REGISTER_REFUSED
    assert "torch sees no CUDA device" in str(refused.value)
    assert lease.cuda_registration is None
    assert lease.numpy("w")[999] == 999.0
    lease.release()
    assert not mapped(lease.path)


class FakeCudart:
    """torch.cuda.cudart() as a driver that refuses the read-only flag (as devices without
    cudaDevAttrHostRegisterReadOnlySupported do) and records what it is asked."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.calls: list[tuple] = []

    def cudaHostRegister(self, pointer: int, nbytes: int, flags: int) -> int:
        self.calls.append(("register", pointer, nbytes, flags))
        return 801 if flags & 0x08 else 0  # cudaErrorNotSupported for the read-only flag

    def cudaGetErrorString(self, code: int) -> str:
        return "operation not supported"

    def cudaHostUnregister(self, pointer: int) -> int:
        # Unregistered while the range is still mapped: after the unmap the driver would keep
        # the pages locked.
        self.calls.append(("unregister", pointer, mapped(self.path)))
        return 0


def test_register_cuda_locks_the_whole_mapping_once_and_release_unlocks_it_before_unmapping(client, monkeypatch):
    client.publish("org/pin", 2, {"w": np.arange(1000, dtype=np.float32)}).wait_visible(timeout=30)
    lease = client.acquire("org/pin", version=2)
    cudart = FakeCudart(lease.path)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "cudart", lambda: cudart)
    base = base_address(lease)
    assert lease.register_cuda() is lease
    lease.register_cuda()  # a second call registers nothing more
    # The read-only flag first (the mapping is PROT_READ), then without it; the whole file.
    assert cudart.calls == [("register", base, lease.size, 0x09), ("register", base, lease.size, 0x01)]
    assert lease.cuda_registration is not None and lease.cuda_registration.flags == 0x01
    assert not lease.cuda_registration.read_only
    lease.release()
    assert cudart.calls[2:] == [("unregister", base, True)]
    assert lease.cuda_registration is None and not mapped(lease.path)
    lease.release()  # twice: nothing more
    assert len(cudart.calls) == 3
