"""Publishing from Python: a torch state_dict read back bit for bit in Python, in TypeScript and
by the safetensors library; per-tensor streams with specs; several writer processes; failures
that abort; and a version larger than 4 GiB."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import xxhash
from relay_process import NODE, REPO

from laminar import LaminarError, RelayClient, error_codes
from laminar.relay.layout import ChunkGrid
from laminar.relay.protocol import TensorInfo
from laminar.relay.segment_writer import SegmentWriter
from laminar.relay.tensor_source import TensorSource, tensor_source

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
from safetensors import safe_open  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PYTHON = sys.executable


@pytest.fixture
def relay(module_relay):
    """The module's relay, shared by its cases (conftest.py's module_relay), each under a model
    name of its own (``model``)."""
    return module_relay


@pytest.fixture
def model(model_name):
    return model_name


@pytest.fixture
def client(relay):
    with RelayClient(relay.socket_path, name="publish test") as c:
        yield c


def versions_of(client: RelayClient, model: str) -> list:
    """The versions the relay holds of ``model`` (whatever their state)."""
    return [v for v in client.status()["versions"] if v["model"] == model]


class Policy(torch.nn.Module):
    """A small transformer-ish module: embeddings and a head in bfloat16, norms in float32,
    integer and bool buffers."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(300, 48)
        self.block = torch.nn.Sequential(torch.nn.Linear(48, 96), torch.nn.GELU(), torch.nn.Linear(96, 48))
        self.norm = torch.nn.LayerNorm(48)
        self.head = torch.nn.Linear(48, 300, bias=False)
        self.register_buffer("position_ids", torch.arange(64, dtype=torch.int64))
        self.register_buffer("mask", torch.rand(8, 8) > 0.5)
        self.embed.to(torch.bfloat16)
        self.head.to(torch.bfloat16)
        self.block[0].to(torch.bfloat16)


def digest(tensor) -> str:
    """sha256 of a tensor's bytes (little-endian, row-major)."""
    if isinstance(tensor, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(tensor).reshape(-1).view(np.uint8)).hexdigest()
    flat = tensor.detach().contiguous().reshape(-1)
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    return hashlib.sha256(flat.view(width).numpy().view(np.uint8)).hexdigest()


def read_in_typescript(socket_path: str, model: str, version: int) -> dict:
    """Acquires the version with the TypeScript client (dist/) and returns, per tensor, its
    dtype, shape and the sha256 of its bytes."""
    script = textwrap.dedent(
        f"""
        import {{ createHash }} from 'node:crypto';
        import {{ RelayClient }} from {json.dumps(str(REPO / "dist/src/relay/client/index.js"))};
        const [socketPath, model, version] = process.argv.slice(1);
        const client = await RelayClient.connect({{ socketPath, reconnect: false, name: 'interop' }});
        const lease = await client.acquire({{ model, version: Number(version) }});
        const out = {{}};
        for (const t of lease.tensors) {{
          out[t.name] = {{ dtype: t.dtype, shape: t.shape, sha256: createHash('sha256').update(lease.bytes(t.name)).digest('hex') }};
        }}
        await lease.release();
        client.close();
        process.stdout.write(JSON.stringify(out));
        """
    )
    done = subprocess.run([NODE, "--input-type=module", "-e", script, socket_path, model, str(version)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


class TestStateDict:
    def test_published_from_python_read_equal_in_python_typescript_and_safetensors(self, client, relay, model):
        torch.manual_seed(0)
        state = Policy().state_dict()
        assert {t.dtype for t in state.values()} >= {torch.bfloat16, torch.float32, torch.int64, torch.bool}
        description = client.publish(model, 7, state, metadata={"step": "7"}).wait_visible(timeout=60)
        assert [t["name"] for t in description["tensors"]] == list(state)

        with client.acquire(model, version=7) as lease:
            tensors = lease.torch()
            for name, expected in state.items():
                assert tensors[name].dtype == expected.dtype, name
                assert tensors[name].shape == expected.shape, name
                assert digest(tensors[name]) == digest(expected), name
            # loads into a freshly built module, strictly
            fresh = Policy()
            fresh.load_state_dict(tensors, strict=True)
            for name, value in fresh.state_dict().items():
                assert torch.equal(value, state[name]), name
            del tensors

            # the segment is a safetensors file the real library reads
            with safe_open(lease.path, framework="pt") as f:
                assert set(f.keys()) == set(state)
                assert f.metadata()["step"] == "7" and f.metadata()["laminar.model"] == model
                for name, expected in state.items():
                    assert torch.equal(f.get_tensor(name), expected), name
            if lease.dir is not None:  # a relay that makes version directories
                with safe_open(os.path.join(lease.dir, "model.safetensors"), framework="pt") as f:
                    assert set(f.keys()) == set(state)

        seen = read_in_typescript(relay.socket_path, model, 7)
        assert set(seen) == set(state)
        for name, expected in state.items():
            assert seen[name]["shape"] == list(expected.shape), name
            assert seen[name]["sha256"] == digest(expected), name
        assert seen["embed.weight"]["dtype"] == "BF16" and seen["norm.weight"]["dtype"] == "F32"

    def test_non_contiguous_and_numpy_tensors(self, client, model):
        base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
        tensors = {
            "transposed": base.t(),
            "strided": base[:, ::2],
            "np_transposed": np.arange(12, dtype=np.int32).reshape(3, 4).T,
            "bf16_transposed": base.to(torch.bfloat16).t(),
            "requires_grad": torch.ones(3, requires_grad=True),
        }
        client.publish(model, 1, tensors).wait_visible(timeout=60)
        with client.acquire(model) as lease:
            views = lease.torch()
            for name, expected in tensors.items():
                expected = torch.as_tensor(expected).detach()
                assert torch.equal(views[name], expected.contiguous()), name
            del views

    @pytest.mark.parametrize("chunk_size", [64 * 1024, 4097])
    def test_large_non_contiguous_tensors_land_byte_for_byte(self, client, chunk_size, model):
        # Parts of many chunks, rows cut by chunk boundaries (64 KiB), elements cut by them
        # (4097 bytes): copied as they are, in parallel, equal to their contiguous copies.
        g = torch.Generator().manual_seed(11)
        rng = np.random.default_rng(11)
        tensors = {
            "transposed_f32": torch.randn(300, 517, generator=g).t(),
            "transposed_bf16": torch.randn(401, 333, generator=g).to(torch.bfloat16).t(),
            "strided_f16": torch.randn(256, 1030, generator=g).half()[:, ::3],
            "sliced_i64": torch.arange(200 * 300).reshape(200, 300)[17:190, 3:251],
            "permuted_3d_f32": torch.randn(9, 70, 41, generator=g).permute(2, 0, 1),
            "np_transposed_f64": rng.standard_normal((150, 222)).T,
            "np_reversed_i8": rng.integers(-128, 127, (333, 257), dtype=np.int8)[::-1, ::2],
        }
        for name, tensor in tensors.items():
            contiguous = tensor.is_contiguous() if isinstance(tensor, torch.Tensor) else tensor.flags.c_contiguous
            assert not contiguous, name
        client.publish(model, 1, tensors, chunk_size=chunk_size).wait_visible(timeout=60)
        with client.acquire(model) as lease:
            lease.verify()
            for name, expected in tensors.items():
                assert digest(lease.numpy(name)) == digest(expected), name

    def test_tensors_that_straddle_odd_chunk_boundaries(self, client, model):
        # 4097-byte chunks cut elements in two; the relay checks every part's checksum at commit.
        rng = np.random.default_rng(3)
        tensors = {
            "a": rng.integers(0, 255, 5001, dtype=np.uint8),
            "b": rng.standard_normal((37, 91)).astype(np.float32),
            "c": rng.standard_normal(3000).astype(np.float64),
            "d": torch.randn(2049, dtype=torch.float32).to(torch.bfloat16),
            "e": np.zeros(0, np.float32),
        }
        description = client.publish(model, 1, tensors, chunk_size=4097).wait_visible(timeout=60)
        assert description["chunkSize"] == 4097
        with client.acquire(model) as lease:
            lease.verify()
            for name, expected in tensors.items():
                assert digest(lease.numpy(name)) == digest(expected), name


class TestStreams:
    def test_an_iterator_of_pairs_with_specs_up_front(self, client, model):
        shapes = {f"layers.{i}.weight": (64, 32) for i in range(6)}
        produced = []

        def per_tensor_params():
            # like verl's get_per_tensor_param(): each tensor made (gathered) when asked for
            for name, shape in shapes.items():
                tensor = torch.full(shape, float(len(produced)), dtype=torch.bfloat16)
                produced.append(name)
                yield name, tensor

        specs = [(name, torch.bfloat16, shape) for name, shape in shapes.items()]
        client.publish(model, 1, per_tensor_params(), specs=specs).wait_visible(timeout=60)
        with client.acquire(model) as lease:
            for i, name in enumerate(shapes):
                assert torch.equal(lease.tensor(name), torch.full(shapes[name], float(i), dtype=torch.bfloat16))

    def test_an_iterator_needs_specs(self, client, model):
        with pytest.raises(LaminarError) as info:
            client.publish(model, 1, iter([("w", torch.ones(2))]))
        assert info.value.code == error_codes.INVALID_ARG

    def test_a_failing_stream_aborts_the_publication(self, client, model):
        def broken():
            yield "a", torch.ones(4)
            raise RuntimeError("the gather failed")

        with pytest.raises(RuntimeError, match="gather failed"):
            client.publish(model, 1, broken(), specs=[("a", "F32", [4]), ("b", "F32", [4])])
        assert versions_of(client, model) == []
        client.publish(model, 1, {"a": torch.ones(4), "b": torch.ones(4)})  # the version is free again

    def test_a_missing_tensor_fails_the_commit_and_aborts(self, client, model):
        with pytest.raises(LaminarError) as info:
            # the relay refuses the commit; the verdict raises once the version is aborted
            client.publish(model, 1, iter([("a", torch.ones(4))]), specs=[("a", "F32", [4]), ("b", "F32", [4])]).wait_visible(timeout=60)
        assert info.value.code == error_codes.INCOMPLETE
        assert versions_of(client, model) == []

    def test_a_publication_left_by_an_exception_is_aborted(self, client, model):
        with pytest.raises(ZeroDivisionError):
            with client.begin(model, 1, [("a", "F32", [4])]) as pub:
                pub.write("a", torch.ones(4))
                1 / 0
        assert versions_of(client, model) == []

    def test_a_tensor_filled_in_place(self, client, model):
        with client.begin(model, 1, [("a", "F32", [4]), ("b", "BF16", [2, 2])]) as pub:
            pub.numpy("a")[:] = [1, 2, 3, 4]
            pub.mark_written("a")
            pub.tensor("b").copy_(torch.eye(2).to(torch.bfloat16))
            pub.mark_written("b")
            pub.commit().wait_visible(timeout=60)
        with client.acquire(model) as lease:
            assert lease.numpy("a").tolist() == [1, 2, 3, 4]
            assert torch.equal(lease.tensor("b"), torch.eye(2).to(torch.bfloat16))


RANK = textwrap.dedent(
    """
    import sys
    import numpy as np
    from laminar import RelayClient

    socket_path, segment, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    with RelayClient(socket_path, name=f"rank {rank}") as relay:
        with relay.attach(segment) as part:  # closing reports what this rank wrote
            part.write(f"rank{rank}.weight", np.full((256, 64), rank, np.float32))
            part.write(f"rank{rank}.bias", np.arange(64, dtype=np.float32) + rank)
    """
)


class TestSeveralWriters:
    def test_ranks_in_their_own_processes_fill_one_version(self, client, relay, model):
        ranks = 4
        specs = []
        for rank in range(ranks):
            specs += [(f"rank{rank}.weight", "F32", [256, 64]), (f"rank{rank}.bias", "F32", [64])]
        pub = client.begin(model, 1, specs)
        pub.write("rank0.weight", np.zeros((256, 64), np.float32))
        pub.write("rank0.bias", np.arange(64, dtype=np.float32))
        children = [
            subprocess.Popen([PYTHON, "-c", RANK, relay.socket_path, pub.segment, str(rank)], stderr=subprocess.PIPE, text=True) for rank in range(1, ranks)
        ]
        for child in children:
            _, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
        pub.commit().wait_visible(timeout=60)
        with client.acquire(model) as lease:
            for rank in range(ranks):
                assert (lease.numpy(f"rank{rank}.weight") == rank).all()
                assert lease.numpy(f"rank{rank}.bias").tolist() == list(np.arange(64) + rank)

    def test_an_attached_writer_cannot_commit_or_abort_for_the_owner(self, client, relay, model):
        pub = client.begin(model, 1, [("a", "F32", [4])])
        with RelayClient(relay.socket_path) as other:
            part = other.attach(pub.segment)
            with pytest.raises(LaminarError) as info:
                part.commit()
            assert info.value.code == error_codes.NOT_OWNER
            part.abort()  # only this writer stops
        pub.write("a", np.ones(4, np.float32))
        pub.commit()


class TestDevicePath:
    """The path a CUDA tensor takes (torch ``copy_`` into the segment, part by part), run with a
    CPU tensor: the same bytes and checksums as the host path."""

    def test_device_copies_match_host_copies(self, tmp_path):
        chunk = 65537
        second = 4096 + 5 * chunk  # the same place in the chunk grid as the first, 5 chunks on
        size = second + 300_001
        path = os.path.join("/dev/shm", f"laminar-py-device-{os.getpid()}")
        try:
            with open(path, "wb") as f:
                f.truncate(size)
            import mmap

            with open(path, "r+b") as f:
                mapping = mmap.mmap(f.fileno(), size)
            data = torch.randint(0, 255, (300_001,), dtype=torch.uint8)
            grid = ChunkGrid(4096, chunk)
            with ThreadPoolExecutor(2) as pool:
                writer = SegmentWriter(mapping, grid, pool)
                host = TensorInfo("h", "U8", (300_001,), 4096, 300_001)
                device = TensorInfo("d", "U8", (300_001,), second, 300_001)
                host_sums = [f.result() for f in writer.write(host, tensor_source(data))]
                device_sums = [f.result() for f in writer.write(device, TensorSource("U8", 300_001, device=data))]
                segment = writer.bytes
                assert bytes(segment[4096 : 4096 + 300_001]) == data.numpy().tobytes()
                assert bytes(segment[second : second + 300_001]) == data.numpy().tobytes()
                del segment
                writer.close()
            assert host_sums == device_sums and len(host_sums) == 5
            assert host_sums[0] == format(xxhash.xxh3_64_intdigest(data.numpy()[:chunk]), "016x")
            mapping.close()
        finally:
            os.unlink(path)


def shm_room_for(needed: int) -> str | None:
    """Why a test of ``needed`` bytes of shared memory cannot run here, or None."""
    free = shutil.disk_usage("/dev/shm").free
    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    if free < needed + (512 << 20):
        return f"/dev/shm has {free >> 20} MiB free, the test needs {needed >> 20} MiB and a margin"
    if available < needed + (1536 << 20):
        return f"{available >> 20} MiB of memory available, the test needs {needed >> 20} MiB and a margin"
    return None


class TestLarge:
    @pytest.fixture
    def client(self, relay_factory):
        """A relay of the case's own, on 4 KiB pages: what the case is about, offsets past 4 GiB,
        does not depend on the page size (test_relay_huge_pages.py covers 2 MiB pages), and the
        writer's pre-fault of 4.5 GiB of 2 MiB pages at begin took 30-50 s here, in the kernel's
        compaction (the case took 18-41 s in clean-clone CI runs), against 5-7 s on 4 KiB pages."""
        relay = relay_factory(["--no-pin", "--huge-pages", "off"])
        with RelayClient(relay.socket_path, name="publish test") as c:
            yield c

    def test_a_version_of_4_5_gib(self, client, model):
        tensor_bytes = 512 << 20
        count = 9
        reason = shm_room_for(tensor_bytes * count)
        if reason:
            pytest.skip(f"not enough shared memory for a 4.5 GiB version: {reason}")
        # Nine different 512 MiB windows of one random buffer: distinct contents (a misplaced
        # tensor fails), 0.5 GiB of private memory for 4.5 GiB published. Drawn as 64-bit words:
        # a byte at a time took 2.4 s, eight times as long.
        words = (tensor_bytes + count * 4096) // 8
        base = np.random.default_rng(1).integers(0, 2**64 - 1, words, dtype=np.uint64, endpoint=True).view(np.uint8)
        tensors = {f"layers.{i}.weight": base[i * 4096 : i * 4096 + tensor_bytes].view(np.uint16) for i in range(count)}
        tensors["tail"] = torch.arange(1000, dtype=torch.float32).to(torch.bfloat16)
        description = client.publish(model, 1, tensors).wait_visible(timeout=60)
        assert description["size"] > 4.5 * (1 << 30)
        with client.acquire(model) as lease:
            lease.verify()  # every chunk against the relay's checksums
            views = lease.numpy()
            with ThreadPoolExecutor(2) as pool:
                sums = dict(zip(views, pool.map(lambda v: xxhash.xxh3_64_intdigest(np.ascontiguousarray(v).view(np.uint8)), views.values())))
            for name in list(tensors)[:-1]:
                assert sums[name] == xxhash.xxh3_64_intdigest(tensors[name].view(np.uint8)), name
            last = lease.info("tail")
            assert last.offset > 4 << 30  # offsets past 4 GiB travel and map right
            assert torch.equal(lease.tensor("tail"), tensors["tail"])
            del views
