"""Reading block-quantised FP8 model files (what the relay serves as a version's FP8 variant, and
what `laminar fp8-convert` writes): `<name>` F8_E4M3 with `<name>_scale_inv` float32, one scale
per 128x128 block, which dequantises as `weight = e4m3(<name>) * <name>_scale_inv` (SGLang's and
vLLM's `weight_block_size` layout). The reference engine runs in float32, so it dequantises at
load time, as an engine without FP8 kernels would.

torch reads FP8 only from 2.1 on, and the `safetensors` library hands such tensors to torch, so
the file is read here with numpy: the header, then each tensor's bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from ... import error_codes
from ...errors import LaminarError

SCALE_SUFFIX = "_scale_inv"
BLOCK = 128


def _e4m3_table() -> np.ndarray:
    """The float32 value of each of the 256 e4m3fn bytes (0x7f and 0xff are NaN)."""
    values = np.empty(256, dtype=np.float32)
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exponent = (byte >> 3) & 0xF
        mantissa = byte & 0x7
        if exponent == 0xF and mantissa == 0x7:
            values[byte] = np.nan
        elif exponent == 0:
            values[byte] = sign * mantissa * 2.0**-9
        else:
            values[byte] = sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return values


E4M3_VALUES = _e4m3_table()


def is_fp8_config(config: Mapping[str, Any]) -> bool:
    """Whether a config.json object declares block-quantised FP8 weights."""
    quant = config.get("quantization_config")
    return isinstance(quant, Mapping) and quant.get("quant_method") == "fp8"


def has_fp8_tensors(path: Path) -> bool:
    """Whether a safetensors file holds F8_E4M3 tensors (an FP8 directory need not have a config.json:
    a relay without `--engine-files` serves the weights alone). Reads the header only."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
    except (OSError, ValueError, struct.error):
        return False  # the regular loader names what is wrong with the file
    return isinstance(header, dict) and any(isinstance(v, dict) and v.get("dtype") == "F8_E4M3" for v in header.values())


def _read_raw(path: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    try:
        data = path.read_bytes()
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
    except (OSError, ValueError, struct.error) as err:
        raise LaminarError(error_codes.BAD_SAFETENSORS, f"cannot read {path}: {err}", {"path": str(path)}) from err
    base = 8 + length
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = (entry["dtype"], tuple(entry["shape"]), data[base + begin : base + end])
    return out


def _to_float32(dtype: str, shape: tuple[int, ...], raw: bytes, name: str, path: Path) -> np.ndarray:
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").reshape(shape)
    if dtype == "BF16":
        return (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype == "F8_E4M3":
        return E4M3_VALUES[np.frombuffer(raw, dtype=np.uint8)].reshape(shape)
    raise LaminarError(error_codes.MODEL_MISMATCH, f"tensor {name} in {path} is {dtype}, which the engine does not load", {"tensor": name})


def load_fp8_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """The float32 state dict of an FP8 file: each F8_E4M3 tensor times its block scales, the scales
    themselves dropped, every other tensor as float32."""
    raw = _read_raw(path)
    state: dict[str, torch.Tensor] = {}
    for name, (dtype, shape, data) in raw.items():
        if name.endswith(SCALE_SUFFIX) and name[: -len(SCALE_SUFFIX)] in raw:
            continue
        values = _to_float32(dtype, shape, data, name, path)
        if dtype == "F8_E4M3":
            scale_entry = raw.get(name + SCALE_SUFFIX)
            rows, cols = shape
            expected = (-(-rows // BLOCK), -(-cols // BLOCK))
            if scale_entry is None or scale_entry[0] != "F32" or scale_entry[1] != expected:
                raise LaminarError(error_codes.MODEL_MISMATCH, f"tensor {name} has no float32 {name}{SCALE_SUFFIX} of shape {list(expected)}", {"tensor": name})
            scales = np.frombuffer(scale_entry[2], dtype="<f4").reshape(expected)
            values = values * np.repeat(np.repeat(scales, BLOCK, axis=0), BLOCK, axis=1)[:rows, :cols]
        state[name] = torch.from_numpy(np.array(values, dtype=np.float32))
    return state
