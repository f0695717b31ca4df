"""TinyLM (laminar.testing.model) and the digits task (laminar.testing.digits): the two paths agree,
model directories round-trip through the real safetensors library and are validated strictly, and
the reward follows its documented rule."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from laminar import error_codes
from laminar.errors import LaminarError
from laminar.testing import KVCache, TinyLM, TinyLMConfig, expected_shapes, load_config, load_model, parameter_count, save_model
from laminar.testing import digits
from laminar.testing.model import CONFIG_FILE, WEIGHTS_FILE

SMALL = TinyLMConfig(vocab_size=16, d_model=32, n_layers=2, n_heads=4, max_seq_len=32)


def small_model(seed: int = 0) -> TinyLM:
    torch.manual_seed(seed)
    return TinyLM(SMALL).eval()


def test_default_config_has_a_few_million_parameters() -> None:
    count = parameter_count(TinyLMConfig())
    assert 2_000_000 < count < 5_000_000
    assert count == sum(p.numel() for p in TinyLM(TinyLMConfig()).parameters())


def test_state_dict_names_and_shapes_are_the_documented_ones() -> None:
    model = small_model()
    shapes = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    assert shapes == expected_shapes(SMALL)
    assert "layers.1.attn.qkv.weight" in shapes and shapes["lm_head.weight"] == (16, 32)


def test_incremental_decoding_matches_the_full_forward_for_ragged_batches() -> None:
    model = small_model()
    ids = torch.randint(0, SMALL.vocab_size, (3, 20), generator=torch.Generator().manual_seed(1))
    full = model(ids)
    cache = KVCache(SMALL, num_slots=5)
    slots = torch.tensor([4, 0, 2])  # any free slots, in any order
    lengths = [3, 9, 14]
    for row, (slot, length) in enumerate(zip(slots.tolist(), lengths)):
        logits = model.prefill(ids[row, :length], cache, slot)
        assert torch.allclose(logits, full[row, length - 1], atol=1e-5)
    positions = torch.tensor(lengths)
    for _ in range(6):
        logits = model.decode(ids[torch.arange(3), positions], slots, positions, cache)
        for row in range(3):
            assert torch.allclose(logits[row], full[row, int(positions[row])], atol=1e-5)
        positions = positions + 1


def test_a_grown_kv_cache_keeps_what_its_slots_hold() -> None:
    """The engine grows its KV cache as its prefix cache fills: a sequence decodes on after the
    growth as if nothing happened, and the new slots serve sequences of their own."""
    model = small_model()
    ids = torch.randint(0, SMALL.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))
    full = model(ids)
    cache = KVCache(SMALL, num_slots=1)
    model.prefill(ids[0, :8], cache, 0)
    cache.grow(3)
    cache.grow(2)  # never shrinks
    assert cache.num_slots == 3 and cache.keys.shape[1] == 3
    model.prefill(ids[1, :8], cache, 2)
    logits = model.decode(ids[:, 8], torch.tensor([0, 2]), torch.tensor([8, 8]), cache)
    for row in range(2):
        assert torch.allclose(logits[row], full[row, 8], atol=1e-5)


def test_prefill_after_a_cached_prefix_matches_the_full_forward() -> None:
    """What the engine's prefix cache relies on: a suffix prefilled after a prefix the slot holds
    (its own, or one copied from another slot) gives the logits and keys of a whole prefill."""
    model = small_model()
    ids = torch.randint(0, SMALL.vocab_size, (20,), generator=torch.Generator().manual_seed(2))
    full = model(ids.view(1, -1))[0]
    cache = KVCache(SMALL, num_slots=3)
    model.prefill(ids, cache, 0)
    model.prefill(ids[:12], cache, 1)
    cache.copy_prefix(1, 2, 12)
    for slot in (1, 2):
        logits = model.prefill(ids[12:], cache, slot, start=12)
        assert torch.allclose(logits, full[-1], atol=1e-5)
        assert torch.allclose(cache.keys[:, slot, :, :20], cache.keys[:, 0, :, :20], atol=1e-6)
        assert torch.allclose(cache.values[:, slot, :, :20], cache.values[:, 0, :, :20], atol=1e-6)
    with pytest.raises(LaminarError) as err:
        model.prefill(ids[:8], cache, 1, start=SMALL.max_seq_len - 4)
    assert err.value.code == error_codes.INVALID_ARG


def test_padding_mask_keeps_padded_keys_out() -> None:
    model = small_model()
    ids = torch.tensor([[1, 14, 5, 6, 3, 0, 0], [1, 15, 5, 6, 7, 8, 3]])
    mask = ids != digits.PAD
    mask[1] = True
    left_padded = torch.tensor([[0, 0, 1, 14, 5, 6, 3]])
    # Right padding: the real positions are the same with or without the mask.
    assert torch.allclose(model(ids, mask)[0, :5], model(ids)[0, :5], atol=1e-5)
    # With the mask the padded keys are invisible: the last position sees only the real tokens.
    masked = model(left_padded, left_padded != digits.PAD)
    assert torch.isfinite(masked).all()
    assert not torch.allclose(masked[0, -1], model(left_padded)[0, -1], atol=1e-4)


def test_sequences_longer_than_max_seq_len_are_refused() -> None:
    model = small_model()
    with pytest.raises(LaminarError) as err:
        model(torch.zeros(1, SMALL.max_seq_len + 1, dtype=torch.long))
    assert err.value.code == error_codes.INVALID_ARG


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    model = small_model(3)
    save_model(model, tmp_path / "v1", metadata={"step": "1"})
    assert json.loads((tmp_path / "v1" / CONFIG_FILE).read_text())["model_type"] == "laminar-tinylm"
    assert load_config(tmp_path / "v1") == SMALL
    loaded = load_model(tmp_path / "v1")
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor)
    assert set(load_file(str(tmp_path / "v1" / WEIGHTS_FILE))) == set(expected_shapes(SMALL))


def write_tensors(directory: Path, tensors: dict[str, torch.Tensor]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / WEIGHTS_FILE))
    (directory / CONFIG_FILE).write_text(json.dumps(SMALL.to_json()))


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda sd: sd.pop("layers.1.mlp.fc_in.bias"), ["layers.1.mlp.fc_in.bias", "missing"]),
        (lambda sd: sd.__setitem__("extra.weight", torch.zeros(2)), ["extra.weight", "not a parameter"]),
        (lambda sd: sd.__setitem__("lm_head.weight", torch.zeros(17, 32)), ["lm_head.weight", "[17, 32]", "[16, 32]"]),
        (lambda sd: sd.__setitem__("norm.weight", torch.zeros(32, dtype=torch.float16)), ["norm.weight", "float16"]),
    ],
    ids=["missing", "unexpected", "shape", "dtype"],
)
def test_a_mismatched_directory_is_refused_naming_the_tensor(tmp_path: Path, change, words) -> None:
    state_dict = {k: v.clone() for k, v in small_model().state_dict().items()}
    change(state_dict)
    write_tensors(tmp_path, state_dict)
    with pytest.raises(LaminarError) as err:
        load_model(tmp_path)
    assert err.value.code == error_codes.MODEL_MISMATCH
    for word in words:
        assert word in err.value.message


def test_bad_config_and_missing_files_are_refused(tmp_path: Path) -> None:
    save_model(small_model(), tmp_path)
    with pytest.raises(LaminarError) as err:
        load_model(tmp_path, TinyLMConfig(vocab_size=16, d_model=64, n_layers=2, n_heads=4, max_seq_len=32))
    assert err.value.code == error_codes.MODEL_MISMATCH
    (tmp_path / CONFIG_FILE).write_text(json.dumps({**SMALL.to_json(), "n_layer": 3}))
    with pytest.raises(LaminarError, match="unknown keys: n_layer"):
        load_model(tmp_path)
    (tmp_path / CONFIG_FILE).write_text("{not json")
    with pytest.raises(LaminarError) as err:
        load_model(tmp_path)
    assert err.value.code == error_codes.MODEL_MISMATCH
    (tmp_path / CONFIG_FILE).unlink()
    with pytest.raises(LaminarError, match="does not exist"):
        load_model(tmp_path)
    (tmp_path / WEIGHTS_FILE).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(LaminarError) as err:
        load_model(tmp_path, SMALL)
    assert err.value.code == error_codes.BAD_SAFETENSORS


def test_digits_prompt_and_target_ids() -> None:
    prompt = digits.make_prompt("reverse", "3141")
    assert prompt.input_ids == [digits.BOS, 14, 7, 5, 8, 5, digits.SEP]
    assert prompt.target == [5, 8, 5, 7]
    assert prompt.max_new_tokens == 5
    assert digits.make_prompt("repeat", "3141").target == [7, 5, 8, 5]
    assert digits.decode(prompt.input_ids) == "<bos> reverse 3 1 4 1 <sep>"
    assert max(prompt.input_ids) < digits.VOCAB_SIZE == len(digits.VOCAB) == TinyLMConfig().vocab_size


@pytest.mark.parametrize(
    "response, expected",
    [
        ([5, 8, 5, 7, digits.EOS], 1.0),
        ([5, 8, 5, 7], 1.0),  # no EOS: still all right
        ([5, 8, 5, 7, 9, 9], 1.0),  # beyond the target: ignored
        ([5, 8, digits.EOS, 7], 0.5),  # EOS ends the response: positions 2 and 3 missing
        ([digits.EOS, 5, 8, 5, 7], 0.0),
        ([], 0.0),
        ([8, 8, 5, 7], 0.75),
        ([5, 8], 0.5),
    ],
)
def test_reward_rule(response: list[int], expected: float) -> None:
    assert digits.reward(response, [5, 8, 5, 7]) == expected


def test_random_prompts_are_reproducible_and_bounded() -> None:
    a = list(digits.random_prompts(50, seed=5, min_digits=2, max_digits=4))
    assert a == list(digits.random_prompts(50, seed=5, min_digits=2, max_digits=4))
    assert all(2 <= len(p.digits) <= 4 for p in a) and {p.task for p in a} == {"reverse", "repeat"}
    with pytest.raises(LaminarError):
        list(digits.random_prompts(1, seed=0, tasks=["sort"]))


def test_prompts_command_writes_prompt_pool_lines() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "laminar.testing.digits", "prompts", "--count", "4", "--seed", "9", "--n", "8"], capture_output=True, text=True, check=True
    ).stdout
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["id"] for line in lines] == [f"digits-9-{i}" for i in range(4)]
    for line in lines:
        assert line["n"] == 8
        payload = line["payload"]
        assert payload == digits.make_prompt(payload["task"], payload["digits"]).payload()
        assert payload["max_new_tokens"] == len(payload["target"]) + 1
    bad = subprocess.run([sys.executable, "-m", "laminar.testing.digits", "prompts", "--count", "1", "--tasks", "sort"], capture_output=True, text=True)
    assert bad.returncode == 2 and "tasks must be among" in bad.stderr
