"""The pure parts of the relay client: the frame codec, the chunk grid, the dtype tables. The
chunk grid is checked against the TypeScript implementation itself (dist/), case by case."""

from __future__ import annotations

import json
import random
import subprocess

import msgpack
import numpy as np
import pytest
from relay_process import CLI, NODE, REPO

from laminar import LaminarError, error_codes
from laminar.relay.dtypes import DTYPE_SIZES, fills, numpy_view_dtype, safetensors_dtype, torch_view_dtype
from laminar.relay.frame import FrameDecoder, decode_payload, encode_frame
from laminar.relay.layout import ChunkGrid, chunk_aligned_parts, chunk_ranges

torch = pytest.importorskip("torch")


class TestFrames:
    def test_a_frame_is_a_big_endian_length_and_a_msgpack_map(self):
        frame = encode_frame({"id": 1, "op": "hello", "protocol": 1})
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        assert msgpack.unpackb(frame[4:], raw=False) == {"id": 1, "op": "hello", "protocol": 1}

    def test_frames_split_anywhere_come_out_whole_and_in_order(self):
        messages = [{"id": i, "op": "status", "pad": "x" * (i * 37)} for i in range(50)]
        stream = b"".join(encode_frame(m) for m in messages)
        rng = random.Random(5)
        for _ in range(20):
            decoder = FrameDecoder()
            out = []
            at = 0
            while at < len(stream):
                step = rng.choice([1, 2, 3, 7, 100, 4096])
                out += [decode_payload(p) for p in decoder.push(stream[at : at + step])]
                at += step
            assert out == messages
            assert decoder.pending_bytes == 0

    def test_byte_by_byte(self):
        frame = encode_frame({"id": 7, "ok": True, "result": {"shape": [1, 2]}})
        decoder = FrameDecoder()
        payloads = [p for b in frame for p in decoder.push(bytes([b]))]
        assert [decode_payload(p) for p in payloads] == [{"id": 7, "ok": True, "result": {"shape": [1, 2]}}]

    def test_a_frame_announcing_more_than_the_limit_is_refused_before_its_payload(self):
        decoder = FrameDecoder(max_frame_bytes=1000)
        with pytest.raises(LaminarError) as info:
            decoder.push((1001).to_bytes(4, "big"))
        assert info.value.code == error_codes.FRAME_TOO_LARGE

    def test_an_empty_frame_is_malformed(self):
        with pytest.raises(LaminarError) as info:
            FrameDecoder().push(b"\0\0\0\0")
        assert info.value.code == error_codes.BAD_FRAME

    def test_a_payload_that_is_not_msgpack_is_malformed(self):
        with pytest.raises(LaminarError) as info:
            decode_payload(b"\xc1")
        assert info.value.code == error_codes.BAD_FRAME

    def test_a_message_over_the_limit_is_not_encoded(self):
        with pytest.raises(LaminarError) as info:
            encode_frame({"blob": b"x" * 2000}, max_frame_bytes=1000)
        assert info.value.code == error_codes.FRAME_TOO_LARGE

    def test_a_message_msgpack_cannot_hold_is_an_invalid_argument(self):
        with pytest.raises(LaminarError) as info:
            encode_frame({"x": object()})
        assert info.value.code == error_codes.INVALID_ARG


def ts_chunk_aligned_parts(cases: list[tuple[int, int, int, int]]) -> list[list[list[int]]]:
    """chunkAlignedParts of src/safetensors/header.ts, run by node on the same cases."""
    script = (
        f"import {{ chunkAlignedParts }} from {json.dumps(str(REPO / 'dist/src/safetensors/header.js'))};\n"
        "import { readFileSync } from 'node:fs';\n"
        "const cases = JSON.parse(readFileSync(0, 'utf8'));\n"
        "process.stdout.write(JSON.stringify(cases.map(([d, c, o, n]) =>"
        " chunkAlignedParts({ dataOffset: d, chunkSize: c }, o, n).map((p) => [p.offset, p.length]))));\n"
    )
    out = subprocess.run([NODE, "--input-type=module", "-e", script], input=json.dumps(cases), capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


class TestChunkGrid:
    def test_parts_are_those_of_the_typescript_client(self):
        assert CLI.exists(), "build dist/ first"
        rng = random.Random(11)
        cases = []
        for _ in range(2000):
            data_offset = rng.choice([4096, 8192, 12288])
            chunk = rng.choice([4096, 4097, 65536, 1 << 20, 32 << 20])
            offset = data_offset + rng.choice([0, rng.randrange(0, 3 * chunk), chunk, 2 * chunk - 1, 5 << 30])
            length = rng.choice([0, 1, chunk - 1, chunk, chunk + 1, rng.randrange(0, 5 * chunk), 40 * chunk + 3])
            cases.append((data_offset, chunk, offset, length))
        expected = ts_chunk_aligned_parts(cases)
        for case, parts in zip(cases, expected):
            d, c, o, n = case
            assert [list(p) for p in chunk_aligned_parts(ChunkGrid(d, c), o, n)] == parts, case

    def test_parts_tile_the_range_and_never_cross_a_chunk(self):
        grid = ChunkGrid(4096, 1000)
        parts = chunk_aligned_parts(grid, 4096 + 999, 2002)
        assert parts == [(5095, 1), (5096, 1000), (6096, 1000), (7096, 1)]

    def test_an_empty_range_is_one_empty_part(self):
        assert chunk_aligned_parts(ChunkGrid(4096, 4096), 8192, 0) == [(8192, 0)]

    def test_chunk_ranges_cover_the_data_section(self):
        assert chunk_ranges(ChunkGrid(4096, 100), 250) == [(4096, 100), (4196, 100), (4296, 50)]
        assert chunk_ranges(ChunkGrid(4096, 100), 0) == []


class TestDtypes:
    def test_every_safetensors_dtype_has_a_numpy_view_of_its_size(self):
        for name, size in DTYPE_SIZES.items():
            assert numpy_view_dtype(name).itemsize == size

    def test_numpy_views_of_the_dtypes_numpy_lacks_are_raw_bits(self):
        assert numpy_view_dtype("BF16") == np.uint16
        assert numpy_view_dtype("F8_E4M3") == np.uint8
        assert numpy_view_dtype("F8_E5M2") == np.uint8
        assert numpy_view_dtype("BOOL") == np.bool_

    def test_torch_views(self):
        assert torch_view_dtype("BF16") == torch.bfloat16
        assert torch_view_dtype("F32") == torch.float32
        expected_f8 = getattr(torch, "float8_e4m3fn", torch.uint8)
        assert torch_view_dtype("F8_E4M3") == expected_f8
        for name, size in DTYPE_SIZES.items():
            assert torch.empty(0, dtype=torch_view_dtype(name)).element_size() == size

    def test_dtypes_of_numpy_and_torch_data(self):
        assert safetensors_dtype(torch.bfloat16) == "BF16"
        assert safetensors_dtype(torch.float16) == "F16"
        assert safetensors_dtype(torch.bool) == "BOOL"
        assert safetensors_dtype(np.float32) == "F32"
        assert safetensors_dtype(np.dtype(">i8")) == "I64"
        assert safetensors_dtype("F32") == "F32"
        assert safetensors_dtype("nonsense") == "nonsense"  # the relay judges names

    def test_dtypes_safetensors_cannot_hold_are_refused(self):
        for dtype in (np.complex64, object, torch.complex64):
            with pytest.raises(LaminarError) as info:
                safetensors_dtype(dtype)
            assert info.value.code == error_codes.BAD_DTYPE

    def test_raw_bits_may_fill_the_dtypes_numpy_lacks(self):
        assert fills("BF16", "U16") and fills("F8_E4M3", "U8") and fills("F32", None)
        assert not fills("BF16", "F16") and not fills("F32", "I32")
