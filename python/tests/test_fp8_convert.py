"""FP8 conversion (`laminar fp8-convert`, the relay's FP8 versions) against a reference: numpy with
ml_dtypes, whose float32 -> float8_e4m3fn cast rounds to nearest even. Every byte of every FP8
tensor and every bit of every scale must agree, on random weights and on the edge values (zeros,
negative zero, subnormals of both formats, values far past e4m3's range, exact ties, blocks cut
short at the edges). Also: bad input (NaN, infinity, nothing to quantise, a config.json that does
not parse) is refused with its code and leaves nothing behind, and the reference engine loads an
FP8 directory with outputs close to the float32 model's."""

from __future__ import annotations

import json
import struct
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from relay_process import CLI, NODE
from safetensors.numpy import save_file

from laminar.testing.engine.weights import load_weights
from laminar.testing.model import TinyLM, TinyLMConfig, save_model

BLOCK = 128
FP8_MAX = np.float32(448.0)
MIN_AMAX = np.float32(1e-4)


def reference(x32: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeepGEMM's per_block_cast_to_fp8 in float32, with ml_dtypes' cast: (e4m3 bytes, scale_inv)."""
    rows, cols = x32.shape
    q = np.empty((rows, cols), dtype=np.uint8)
    scales = np.empty((-(-rows // BLOCK), -(-cols // BLOCK)), dtype=np.float32)
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            block = x32[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK]
            amax = np.maximum(np.abs(block).max(), MIN_AMAX)
            y = block * (FP8_MAX / amax)
            assert y.dtype == np.float32
            q[i * BLOCK : (i + 1) * BLOCK, j * BLOCK : (j + 1) * BLOCK] = np.clip(y, -FP8_MAX, FP8_MAX).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
            scales[i, j] = amax / FP8_MAX
    return q, scales


def read_raw(path: Path) -> dict[str, tuple[str, list[int], bytes]]:
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    return {k: (v["dtype"], v["shape"], data[8 + n + v["data_offsets"][0] : 8 + n + v["data_offsets"][1]]) for k, v in header.items() if k != "__metadata__"}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A safetensors file whose uint16 arrays are BF16 (safetensors.numpy would label them U16)."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        dtype = {np.dtype(np.uint16): "BF16", np.dtype(np.float32): "F32"}[array.dtype]
        blob = np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def bf16(x: np.ndarray) -> np.ndarray:
    """x rounded to bfloat16, as the uint16 words safetensors stores."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def edge_matrix(rng: np.random.Generator) -> np.ndarray:
    """300 x 260 float32 (blocks cut short on both edges) holding every edge case in some block."""
    x = rng.normal(scale=0.02, size=(300, 260)).astype(np.float32)
    x[0:128, 128:256] = 0.0  # an all-zero block: amax clamped to 1e-4
    x[0, 128] = -0.0
    # A block whose amax is 448 exactly: scale 1, so these are ties of e4m3 itself.
    b = x[128:256, 0:128]
    b[0, 0] = 448.0
    b[1, :8] = [1.0625, 1.1875, -1.0625, 2.125, 0.0029296875, 0.0048828125, -0.0009765625, 0.00146484375]
    b[2, :4] = [0.0009765625 / 2, -0.0009765625 / 2, 1e-30, -1e-30]  # ties at zero, and underflow to +-0
    b[3, :3] = [240.0, 232.0, -447.0]  # a tie in the top binade, values near the top
    # Far past e4m3's range, and near bf16's limits: the block scale brings them in.
    x[256:300, 0:128] = rng.normal(size=(44, 128)).astype(np.float32) * np.float32(1e30)
    x[256, 0] = np.float32(3.3e38)
    x[128:256, 128:256] *= np.float32(1e-36)  # a block of bf16/f32 subnormals and tiny normals
    x[128, 128] = np.float32(1e-40)
    x[129, 129] = -np.float32(1e-40)
    x[0:128, 256:260] = [[1e-5, -2e-5, 3e-6, -0.0]] * 128  # a narrow block below the amax clamp
    return x


def convert(src: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([NODE, str(CLI), "fp8-convert", str(src), str(out), "--json", *args], capture_output=True, text=True, timeout=60)


def test_bit_exact_against_ml_dtypes(tmp_path: Path) -> None:
    rng = np.random.default_rng(46)
    edges = edge_matrix(rng)
    bf16_words = bf16(edges)
    f32_random = rng.normal(scale=0.05, size=(129, 384)).astype(np.float32)
    tensors = {
        "model.embed_tokens.weight": bf16(rng.normal(size=(64, 32))),
        "model.layers.0.input_layernorm.weight": bf16(np.ones(32)),
        "model.layers.0.self_attn.q_proj.weight": bf16_words,
        "model.layers.0.self_attn.q_proj.bias": bf16(rng.normal(size=300)),
        "model.layers.0.mlp.up_proj.weight": f32_random,
        "model.layers.0.mlp.down_proj.weight": edges,
        "lm_head.weight": bf16(rng.normal(size=(64, 32))),
    }
    src = tmp_path / "src"
    src.mkdir()
    write_safetensors(src / "model.safetensors", tensors)
    (src / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 32}))

    result = convert(src, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["quantised"] == 3
    out = read_raw(tmp_path / "out" / "model.safetensors")
    for name, x32 in [
        ("model.layers.0.self_attn.q_proj.weight", (bf16_words.astype(np.uint32) << 16).view(np.float32)),
        ("model.layers.0.mlp.up_proj.weight", f32_random),
        ("model.layers.0.mlp.down_proj.weight", edges),
    ]:
        q, scales = reference(x32)
        dtype, shape, raw = out[name]
        assert (dtype, shape) == ("F8_E4M3", list(x32.shape))
        got = np.frombuffer(raw, dtype=np.uint8).reshape(x32.shape)
        mismatched = np.argwhere(got != q)
        assert mismatched.size == 0, (
            f"{name}: {len(mismatched)} bytes differ, first at {mismatched[0]}: {got[tuple(mismatched[0])]:#x} != {q[tuple(mismatched[0])]:#x}"
        )
        sdtype, sshape, sraw = out[name + "_scale_inv"]
        assert (sdtype, sshape) == ("F32", list(scales.shape))
        assert np.frombuffer(sraw, dtype="<u4").tobytes() == scales.view(np.uint32).tobytes()
    # The edge cases are in there: negative zero, e4m3 subnormals, saturated-free maximum.
    q_edges = np.frombuffer(out["model.layers.0.mlp.down_proj.weight"][2], dtype=np.uint8)
    assert {0x80, 0x7E, 0x01}.issubset(set(q_edges.tolist()))
    # The block of scale 1 by hand: ties go to the even neighbour, in normals and subnormals alike.
    ties = q_edges.reshape(edges.shape)[128:256, 0:128]
    assert ties[0, 0] == 0x7E
    assert ties[1, :8].tolist() == [0x38, 0x3A, 0xB8, 0x40, 0x02, 0x02, 0x80, 0x01]
    assert ties[2, :4].tolist() == [0x00, 0x80, 0x00, 0x80]
    assert ties[3, :3].tolist() == [0x77, 0x76, 0xFE]
    # Kept tensors are byte for byte the source's.
    for name in ("model.embed_tokens.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.q_proj.bias", "lm_head.weight"):
        assert out[name][0] == "BF16" and out[name][2] == tensors[name].tobytes()
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["hidden_size"] == 32
    assert config["quantization_config"] == {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
        "ignored_layers": ["model.embed_tokens", "lm_head"],
    }


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_refused(tmp_path: Path, bad: float) -> None:
    x = np.ones((200, 200), dtype=np.float32)
    x[150, 7] = bad
    save_file({"w.weight": x}, str(tmp_path / "in.safetensors"))
    result = convert(tmp_path / "in.safetensors", tmp_path / "out")
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "ERR_FP8_NON_FINITE" in result.stderr and f"element {150 * 200 + 7}" in result.stderr
    assert not (tmp_path / "out" / "model.safetensors").exists()
    assert list((tmp_path / "out").iterdir()) == []


def test_nothing_to_quantise_refused(tmp_path: Path) -> None:
    save_file({"norm.weight": np.ones(8, np.float32), "embed_tokens.weight": np.ones((4, 8), np.float32)}, str(tmp_path / "in.safetensors"))
    result = convert(tmp_path / "in.safetensors", tmp_path / "out")
    assert result.returncode == 1 and "ERR_FP8_NO_ELIGIBLE_TENSORS" in result.stderr, (result.returncode, result.stdout, result.stderr)
    assert not (tmp_path / "out").exists()


def test_config_that_does_not_parse_refused(tmp_path: Path) -> None:
    save_file({"w.weight": np.ones((4, 8), np.float32)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text('{"model_type": "llama",')
    result = convert(tmp_path, tmp_path / "out")
    assert result.returncode == 1 and "ERR_FP8_BAD_CONFIG" in result.stderr, (result.returncode, result.stdout, result.stderr)
    assert not (tmp_path / "out").exists()


def test_reference_engine_loads_fp8_close_to_float32(tmp_path: Path) -> None:
    torch.manual_seed(0)
    config = TinyLMConfig()
    model = TinyLM(config).eval()
    save_model(model, tmp_path / "f32")
    result = convert(tmp_path / "f32", tmp_path / "fp8")
    assert result.returncode == 0, result.stderr
    fp8_model, fp8_config = load_weights(str(tmp_path / "fp8"), serving=config, fallback=None)
    assert fp8_config == config
    ids = torch.randint(0, config.vocab_size, (4, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids)
        got = fp8_model(ids)
    assert not torch.equal(got, want)  # it did quantise
    relative = (got - want).norm() / want.norm()
    assert relative < 0.05, relative
    agree = (got.argmax(-1) == want.argmax(-1)).float().mean()
    assert agree > 0.9, agree
    # Without config.json (a relay without --engine-files serves the weights alone): found by dtype.
    (tmp_path / "fp8" / "config.json").unlink()
    bare, _ = load_weights(str(tmp_path / "fp8"), serving=config, fallback=None)
    with torch.no_grad():
        assert torch.equal(bare(ids), got)
