"""LoRA adapter versions from Python (``RelayClient.publish_lora``) against a real relay: a
PEFT-style state dict of a TinyLM adapter published beside its base and read back in PEFT's
layout with the safetensors library; configs as text, mappings and PEFT-like objects (sets,
enums); bad input refused with typed errors and nothing left; and the shared wire vectors
(test/vectors/lora-adapters.json, also read by test/relay/lora-vectors.test.ts)."""

from __future__ import annotations

import enum
import json
import os
from pathlib import Path

import numpy as np
import pytest
from relay_process import REPO

from laminar import LaminarError, RelayClient, error_codes
from laminar.relay.lora import adapter_config_text, lora_base_of, lora_request, version_kind

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402

from laminar.testing.lora import read_lora_adapter  # noqa: E402
from laminar.testing.model import TinyLM, TinyLMConfig  # noqa: E402

pytestmark = pytest.mark.timeout(120)

BASE = "org/tiny"
ADAPTER = "org/tiny-lora"
RANK = 4
CONFIG = TinyLMConfig(d_model=32, n_layers=2, n_heads=2)


def base_model() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM(CONFIG)


def base_state_dict() -> dict[str, torch.Tensor]:
    return base_model().state_dict()


def peft_state_dict(seed: int = 1, modules: tuple[str, ...] = ("attn.qkv", "attn.out"), rank: int = RANK) -> dict[str, torch.Tensor]:
    """What ``get_peft_model_state_dict`` gives for a LoRA of TinyLM's attention: no adapter name in the keys."""
    base = base_state_dict()
    generator = torch.Generator().manual_seed(seed)
    out: dict[str, torch.Tensor] = {}
    for layer in range(CONFIG.n_layers):
        for module in modules:
            rows, cols = base[f"layers.{layer}.{module}.weight"].shape
            key = f"base_model.model.layers.{layer}.{module}"
            out[f"{key}.lora_A.weight"] = torch.randn(rank, cols, generator=generator)
            out[f"{key}.lora_B.weight"] = torch.randn(rows, rank, generator=generator)
    return out


class PeftType(str, enum.Enum):
    LORA = "LORA"


class PeftLikeConfig:
    """Stands for peft.LoraConfig (not installed here): its to_dict() has a set and enums."""

    def to_dict(self) -> dict:
        return {"peft_type": PeftType.LORA, "r": RANK, "lora_alpha": 8, "target_modules": {"qkv", "out"}, "bias": "none", "base_model_name_or_path": BASE}


def config_dict(**overrides: object) -> dict:
    return {"peft_type": "LORA", "r": RANK, "lora_alpha": 8, "target_modules": ["qkv", "out"], "bias": "none", "base_model_name_or_path": BASE, **overrides}


@pytest.fixture
def client(relay):
    with RelayClient(relay.socket_path, name="lora test") as c:
        c.publish(BASE, 1, base_state_dict()).wait_visible(timeout=60)
        yield c


def test_publish_lora_serves_peft_layout(client: RelayClient) -> None:
    adapter = peft_state_dict()
    description = client.publish_lora(ADAPTER, 1, adapter, config=PeftLikeConfig(), base_model=BASE, base_version=1).wait_visible(timeout=60)
    directory = Path(description["dir"])
    assert sorted(os.listdir(directory)) == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads((directory / "adapter_config.json").read_text())
    assert config == {"peft_type": "LORA", "r": RANK, "lora_alpha": 8, "target_modules": ["out", "qkv"], "bias": "none", "base_model_name_or_path": BASE}
    with safe_open(str(directory / "adapter_model.safetensors"), framework="pt") as f:
        assert sorted(f.keys()) == sorted(adapter)
        for name, tensor in adapter.items():
            assert torch.equal(f.get_tensor(name), tensor)
    # The reference engine's reader (what /load_lora_adapter runs) takes the directory as it is.
    weights = read_lora_adapter(directory, base_model())
    assert weights.scale == 8 / RANK
    assert sorted(weights.modules) == sorted({k.removeprefix("base_model.model.").rsplit(".lora_", 1)[0] for k in adapter})
    with client.acquire(ADAPTER, version=1) as lease:
        assert version_kind(lease.metadata) == "lora"
        assert lora_base_of(lease.metadata) == {"model": BASE, "version": 1}
    versions = {(v["model"], v["version"]): v for v in client.status()["versions"]}
    assert versions[(ADAPTER, 1)]["kind"] == "lora"
    assert versions[(ADAPTER, 1)]["base"] == {"model": BASE, "version": 1}
    assert versions[(BASE, 1)]["kind"] == "full"
    assert versions[(BASE, 1)]["leases"] == 1  # kept for the adapter


def test_config_forms() -> None:
    text = '{"peft_type": "LORA"}'
    assert adapter_config_text(text) == text
    assert adapter_config_text(text.encode()) == text
    assert json.loads(adapter_config_text(config_dict())) == config_dict()
    assert json.loads(adapter_config_text(PeftLikeConfig()))["target_modules"] == ["out", "qkv"]
    with pytest.raises(LaminarError) as err:
        adapter_config_text(42)
    assert err.value.code == error_codes.LORA_BAD_CONFIG


@pytest.mark.parametrize(
    "case, code",
    [
        ("other base", error_codes.LORA_BASE_MISMATCH),
        ("base version not held", error_codes.LORA_BASE_MISMATCH),
        ("lora_B missing", error_codes.LORA_BAD_TENSORS),
        ("adapter name in the keys", error_codes.LORA_BAD_TENSORS),
        ("config does not parse", error_codes.LORA_BAD_CONFIG),
    ],
)
def test_bad_adapters_are_refused_and_leave_nothing(client: RelayClient, case: str, code: str) -> None:
    adapter = peft_state_dict()
    config: object = config_dict()
    base_version = 1
    if case == "other base":
        # An adapter of a model twice as wide: no weight of this base fits it.
        wider = {"lora_A": (1, 2), "lora_B": (2, 1)}
        adapter = {k: torch.zeros(v.shape[0] * wider[k.split(".")[-2]][0], v.shape[1] * wider[k.split(".")[-2]][1]) for k, v in adapter.items()}
    elif case == "base version not held":
        base_version = 9
    elif case == "lora_B missing":
        adapter = {k: v for k, v in adapter.items() if k != "base_model.model.layers.1.attn.out.lora_B.weight"}
    elif case == "adapter name in the keys":
        adapter = {k.replace(".weight", ".default.weight"): v for k, v in adapter.items()}
    else:
        config = '{"peft_type": "LORA", "r": 4,'
    before = client.status()["usedBytes"]
    with pytest.raises(LaminarError) as err:
        client.publish_lora(ADAPTER, 1, adapter, config=config, base_model=BASE, base_version=base_version)
    assert err.value.code == code
    status = client.status()
    assert [v["model"] for v in status["versions"]] == [BASE]
    assert status["usedBytes"] == before
    # Nothing half built: the same version publishes right afterwards.
    client.publish_lora(ADAPTER, 1, peft_state_dict(), config=config_dict(), base_model=BASE, base_version=1).wait_visible(timeout=60)


def test_shared_vectors(relay) -> None:
    vectors = json.loads((Path(REPO) / "test" / "vectors" / "lora-adapters.json").read_text())

    def zeros(specs: list) -> dict:
        return {s["name"]: np.zeros(s["shape"], dtype=np.float32) for s in specs}

    with RelayClient(relay.socket_path, name="lora vectors") as c:
        c.publish(vectors["base"]["model"], vectors["base"]["version"], zeros(vectors["tensors"]["base"])).wait_visible(timeout=60)
        for case in vectors["cases"]:
            request = case["request"]
            sent = lora_request(request["config"], request["baseModel"], request.get("baseVersion"))
            assert sent == request, case["name"]
            c.publish_lora(
                case["model"],
                case["version"],
                zeros(vectors["tensors"]["adapter"]),
                config=request["config"],
                base_model=request["baseModel"],
                base_version=request.get("baseVersion"),
            ).wait_visible(timeout=60)
            with c.acquire(case["model"], version=case["version"]) as lease:
                recorded = {k: v for k, v in lease.metadata.items() if k == "laminar.kind" or k.startswith("laminar.lora.")}
                assert recorded == case["metadata"], case["name"]
                assert version_kind(lease.metadata) == case["kind"]
                assert lora_base_of(lease.metadata) == case["loraBase"]
