"""Version directories (``<shm-dir>/models/<model>/v<N>/``) as engines use them: loaded with the
real ``safetensors`` library and into a freshly built ``torch.nn.Module`` with
``load_state_dict(strict=True)``, with the engine files of ``--engine-files`` beside the weights;
and a directory that keeps showing its own version while later versions recycle segments."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from laminar import RelayClient

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
from safetensors import safe_open  # noqa: E402

pytestmark = pytest.mark.timeout(120)

MODEL = "org/tiny-lm"
MODEL_DIR = "org~2ftiny-lm"  # the relay's encoding of the model id (docs/components/relay.md)

ENGINE_CONFIG = {"architectures": ["TinyLM"], "model_type": "tiny-lm", "hidden_size": 16, "vocab_size": 32, "num_hidden_layers": 2}


class TinyLM(torch.nn.Module):
    """A small model with the parts an LLM's state_dict has: embedding, layers, norm, head and a
    persistent buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(32, 16)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(16, 16) for _ in range(2)])
        self.norm = torch.nn.LayerNorm(16)
        self.lm_head = torch.nn.Linear(16, 32, bias=False)
        self.register_buffer("inv_freq", torch.arange(8, dtype=torch.float32) / 8)

    def forward(self, tokens: "torch.Tensor") -> "torch.Tensor":
        x = self.embed(tokens)
        for layer in self.layers:
            x = torch.relu(layer(x)) + x * self.inv_freq.mean()
        return self.lm_head(self.norm(x))


def built(seed: int) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM()


@pytest.fixture
def engine_files(tmp_path: Path) -> Path:
    """A model directory as Hugging Face ships one: engine files, plus weights that must stay out."""
    d = tmp_path / "tiny-lm"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(ENGINE_CONFIG))
    (d / "generation_config.json").write_text(json.dumps({"max_new_tokens": 8}))
    (d / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64}))
    (d / "tokenizer.json").write_text(json.dumps({"version": "1.0"}))
    (d / "model.safetensors").write_bytes(b"stale weights of the checkpoint")
    (d / "model.safetensors.index.json").write_text("{}")
    return d


def test_a_version_directory_loads_into_a_fresh_module(relay_factory, engine_files: Path) -> None:
    relay = relay_factory(["--no-pin", "--engine-files", str(engine_files)])
    trained = built(seed=1)
    state = trained.state_dict()
    with RelayClient(relay.socket_path, name="version dir test") as client:
        committed = client.publish(MODEL, 1, state).wait_visible(timeout=60)
        version_dir = Path(relay.shm_dir) / "models" / MODEL_DIR / "v1"
        assert committed["dir"] == str(version_dir)
        # The engine's view: hold a lease while loading, as an engine adapter does.
        with client.acquire(MODEL) as lease:
            assert lease.dir == str(version_dir)
            weights = version_dir / "model.safetensors"
            # A hard link: the segment itself, no copy.
            assert os.stat(weights).st_ino == os.stat(committed["path"]).st_ino

            with safe_open(str(weights), framework="pt") as f:
                assert set(f.keys()) == set(state)
                for name in state:
                    assert torch.equal(f.get_tensor(name), state[name]), name
                assert f.metadata()["laminar.model"] == MODEL
                assert f.metadata()["laminar.version"] == "1"

            fresh = built(seed=2)
            assert not torch.equal(fresh.lm_head.weight, trained.lm_head.weight)
            result = fresh.load_state_dict(safetensors_torch.load_file(str(weights)), strict=True)
            assert list(result.missing_keys) == [] and list(result.unexpected_keys) == []
            for name, tensor in fresh.state_dict().items():
                assert torch.equal(tensor, state[name]), name
            tokens = torch.tensor([[1, 5, 7, 31]])
            with torch.no_grad():
                assert torch.equal(fresh(tokens), trained(tokens))

            # Beside the weights, what an engine needs to start, and no other weights.
            names = sorted(os.listdir(version_dir))
            assert names == ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
            assert json.loads((version_dir / "config.json").read_text()) == ENGINE_CONFIG
            assert os.path.islink(version_dir / "config.json")
            assert os.readlink(version_dir / "config.json") == str(engine_files.resolve() / "config.json")

        status_dirs = {v["version"]: v["dir"] for v in client.status()["versions"]}
        assert status_dirs == {1: str(version_dir)}


def test_a_directory_shows_its_own_version_while_later_ones_recycle_segments(relay_factory) -> None:
    relay = relay_factory(["--no-pin", "--keep-versions", "0", "--spare-segments", "1", "--spare-quiet", "50ms"])
    states = {v: built(seed=10 + v).state_dict() for v in range(1, 6)}
    root = Path(relay.shm_dir) / "models" / MODEL_DIR

    def loaded(version: int) -> dict:
        return safetensors_torch.load_file(str(root / f"v{version}" / "model.safetensors"))

    def same(a: dict, b: dict) -> bool:
        return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)

    def versions(client: RelayClient) -> list:
        return sorted(v["version"] for v in client.status()["versions"])

    with RelayClient(relay.socket_path, name="version dir recycling test") as client:
        client.publish(MODEL, 1, states[1]).wait_visible(timeout=60)
        held = client.acquire(MODEL, version=1)
        for v in (2, 3, 4):
            client.publish(MODEL, v, states[v]).wait_visible(timeout=60)
        # v1 is leased: kept, with its directory showing v1; v2 and v3 retired (their files
        # recycled into later versions), their directories gone.
        assert versions(client) == [1, 4]
        assert sorted(os.listdir(root)) == ["v1", "v4"]
        assert same(loaded(1), states[1])
        assert same(loaded(4), states[4])
        held.release()
        deadline = time.monotonic() + 10
        while versions(client) != [4]:
            assert time.monotonic() < deadline, "v1 was not retired after its release"
            time.sleep(0.02)
        # A version retires and loses its directory in one step of the relay.
        assert sorted(os.listdir(root)) == ["v4"]
        client.publish(MODEL, 5, states[5]).wait_visible(timeout=60)
        assert sorted(os.listdir(root)) == ["v5"]
        assert same(loaded(5), states[5])
