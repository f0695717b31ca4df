"""The GRPO example (python/examples/grpo_digits/): its loss on hand-made numbers (advantages per
group, zero-variance groups, ratio clipping, the response mask, the KL term), the staleness
clock, a step that moves the policy toward the rewarded response, and the trainer as a real
process against a real relay, nats-server and sampler service, on records written into the
buffer as a rollout writes them."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "grpo_digits"
sys.path.insert(0, str(EXAMPLE))

from grpo_loss import group_advantages, grpo_loss, pad_sequences, shift_behaviour_logprobs, token_logprobs  # noqa: E402
from grpo_update import UpdateOptions, grpo_step  # noqa: E402
from model_setup import PRESETS, build_model  # noqa: E402
from relay_process import remove_shm_dir  # noqa: E402
from sampler_service import SamplerService  # noqa: E402
from staleness import VersionClock, summary  # noqa: E402
from training_batch import TrainingBatch  # noqa: E402

from laminar import RelayClient  # noqa: E402
from laminar.data import Sampler, SyncExperienceWriter  # noqa: E402
from laminar.testing import load_model  # noqa: E402
from laminar.testing.lora import read_lora_adapter  # noqa: E402
from laminar.testing.digits import EOS, make_prompt  # noqa: E402

pytestmark = pytest.mark.timeout(180)

TRAINER = EXAMPLE / "trainer.py"


# -- advantages ------------------------------------------------------------------------------


def test_advantages_are_normalised_within_each_group():
    rewards = [0.0, 1.0, 0.5, 0.2, 0.4, 0.9]
    groups = ["a", "b", "a", "b", "a", "b"]  # interleaved: membership, not position, decides
    adv = group_advantages(rewards, groups)
    for g in ("a", "b"):
        idx = [i for i, x in enumerate(groups) if x == g]
        r = np.array(rewards)[idx]
        np.testing.assert_allclose(adv[idx], (r - r.mean()) / (r.std(ddof=1) + 1e-6))
        assert abs(adv[idx].mean()) < 1e-12
        np.testing.assert_allclose(adv[idx].std(ddof=1), 1.0, rtol=1e-5)


def test_zero_variance_and_single_sample_groups_give_zero_advantage():
    # 0.1 * 3 / 3 is not exactly 0.1 in floating point: the group must still give exactly 0.
    adv = group_advantages([0.1, 0.1, 0.1, 1.0, 1.0, 0.3, 0.0, 1.0], ["a", "a", "a", "b", "b", "c", "d", "d"])
    assert adv[:6].tolist() == [0.0] * 6
    assert adv[6] < 0 < adv[7]
    with pytest.raises(ValueError):
        group_advantages([1.0, 2.0], ["a"])


# -- the loss --------------------------------------------------------------------------------


def loss_and_grad(new: list[float], old: list[float], adv: list[float], mask: list[float], clip: float = 0.2, **kw: Any) -> tuple[float, np.ndarray]:
    """The loss of a batch of one-token sequences and its gradient with respect to the logprobs."""
    lp = torch.tensor([[x] for x in new], dtype=torch.float64, requires_grad=True)
    parts = grpo_loss(lp, torch.tensor([[x] for x in old], dtype=torch.float64), torch.tensor(adv), torch.tensor([[m] for m in mask]), clip=clip, **kw)
    parts.loss.backward()
    assert lp.grad is not None
    return float(parts.loss), lp.grad.numpy()[:, 0]


def test_on_policy_the_loss_is_the_policy_gradient():
    # ratio 1 everywhere: loss = -mean(A), d loss / d logprob = -A / tokens.
    loss, grad = loss_and_grad([-1.0, -2.0, -0.5], [-1.0, -2.0, -0.5], [1.0, -1.0, 0.5], [1, 1, 1])
    assert loss == pytest.approx(-(1.0 - 1.0 + 0.5) / 3)
    np.testing.assert_allclose(grad, [-1 / 3, 1 / 3, -0.5 / 3])


def test_the_ratio_is_clipped_where_it_would_push_further():
    up, down = np.log(1.5), np.log(0.5)
    # A > 0, ratio 1.5 > 1.2: clipped at 1.2, no gradient (the step would only push it further).
    loss, grad = loss_and_grad([up], [0.0], [2.0], [1])
    assert loss == pytest.approx(-1.2 * 2.0) and grad[0] == 0.0
    # A > 0, ratio 0.5: the unclipped term is the smaller one; the gradient pulls it up.
    loss, grad = loss_and_grad([down], [0.0], [2.0], [1])
    assert loss == pytest.approx(-0.5 * 2.0) and grad[0] == pytest.approx(-0.5 * 2.0)
    # A < 0, ratio 0.5 < 0.8: clipped at 0.8, no gradient.
    loss, grad = loss_and_grad([down], [0.0], [-2.0], [1])
    assert loss == pytest.approx(0.8 * 2.0) and grad[0] == 0.0
    # A < 0, ratio 1.5: unclipped (pessimistic for A < 0), gradient pushes the logprob down.
    loss, grad = loss_and_grad([up], [0.0], [-2.0], [1])
    assert loss == pytest.approx(1.5 * 2.0) and grad[0] == pytest.approx(1.5 * 2.0)
    # A wider clip lets 1.5 through.
    loss, _ = loss_and_grad([up], [0.0], [2.0], [1], clip=0.6)
    assert loss == pytest.approx(-1.5 * 2.0)
    lp = torch.tensor([[up], [0.0]])
    parts = grpo_loss(lp, torch.zeros(2, 1), torch.tensor([1.0, 1.0]), torch.ones(2, 1))
    assert parts.clip_fraction == pytest.approx(0.5)
    with pytest.raises(ValueError):
        grpo_loss(lp, torch.zeros(2, 1), torch.tensor([1.0, 1.0]), torch.ones(2, 1), clip=0.0)


def test_masked_tokens_do_not_count():
    full, _ = loss_and_grad([-1.0, -3.0], [-1.0, -1.0], [1.0, 1.0], [1, 0])
    changed, grad = loss_and_grad([-1.0, -9.0], [-1.0, 5.0], [1.0, 1.0], [1, 0])
    assert full == changed and grad[1] == 0.0


def test_kl_term_is_zero_at_the_reference_and_positive_away_from_it():
    lp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2)
    at = grpo_loss(lp, lp, torch.tensor([0.0]), mask, reference_logprobs=lp.clone(), kl_coef=0.5)
    assert at.kl == 0.0 and float(at.loss) == 0.0
    away = grpo_loss(lp, lp, torch.tensor([0.0]), mask, reference_logprobs=lp - 0.7, kl_coef=0.5)
    assert away.kl > 0 and float(away.loss) == pytest.approx(0.5 * away.kl)
    with pytest.raises(ValueError):
        grpo_loss(lp, lp, torch.tensor([0.0]), mask, kl_coef=0.5)


def test_layout_of_sequences_masks_and_behaviour_logprobs():
    tokens, mask = pad_sequences([np.array([1, 2, 3, 4]), np.array([5, 6, 7])], [2, 1])
    assert tokens.tolist() == [[1, 2, 3, 4], [5, 6, 7, 0]]
    # entry t predicts token t + 1: responses are tokens 2..3 of the first, 1..2 of the second.
    assert mask.tolist() == [[0, 1, 1], [1, 1, 0]]
    old = shift_behaviour_logprobs([np.array([0, 0, -0.5, -0.25], dtype=np.float32), np.array([0, -1, -2], dtype=np.float32)], 4)
    assert old.tolist() == [[0, -0.5, -0.25], [-1, -2, 0]]
    # No prompt: the first token has nothing to be predicted from. No response: a zero row.
    tokens, mask = pad_sequences([np.array([7, 8, 9]), np.array([5])], [0, 1])
    assert tokens.tolist() == [[7, 8, 9], [5, 0, 0]] and mask.tolist() == [[1, 1], [0, 0]]
    with pytest.raises(ValueError):
        pad_sequences([np.array([1, 2])], [3])


def test_observation_tokens_of_a_multi_turn_response_are_masked_out():
    # prompt [1, 20], turn [16, 17], observation [18, 7, 19], turn [7, 2]: the sampler's loss mask.
    seq = np.array([1, 20, 16, 17, 18, 7, 19, 7, 2])
    loss_mask = np.array([0, 0, 1, 1, 0, 0, 0, 1, 1], dtype=np.uint8)
    _, mask = pad_sequences([seq, np.array([1, 2, 3])], [2, 1], loss_masks=[loss_mask, np.array([0, 1, 1], dtype=np.uint8)])
    # entry t predicts token t + 1: the observation's three tokens (4..6) are not trained on.
    assert mask.tolist() == [[0, 1, 1, 0, 0, 0, 1, 1], [1, 1, 0, 0, 0, 0, 0, 0]]
    with pytest.raises(ValueError):
        pad_sequences([seq], [2], loss_masks=[loss_mask[:-1]])


def test_token_logprobs_are_the_models_log_softmax():
    model = build_model(PRESETS["tiny"], seed=3)
    tokens = torch.tensor([[1, 15, 5, 6, 3, 5, 6, 2]])
    lp = token_logprobs(model, tokens)
    expected = torch.log_softmax(model(tokens[:, :-1]), -1)[0, torch.arange(7), tokens[0, 1:]]
    torch.testing.assert_close(lp[0], expected)


def test_a_step_makes_the_rewarded_response_likelier():
    torch.manual_seed(0)
    model = build_model(PRESETS["tiny"], seed=1)
    prompt = make_prompt("repeat", "123")
    good = np.array(prompt.input_ids + prompt.target + [EOS])
    bad = np.array(prompt.input_ids + [4, 4, 4, EOS])
    seqs = [good, bad, good, bad]
    tokens, mask = pad_sequences(seqs, [len(prompt.input_ids)] * 4)
    with torch.no_grad():
        stored = token_logprobs(model, tokens)
    before = (stored * mask).sum(-1)
    # As a record stores them: one per token, the first (nothing predicts it) 0.
    behaviour = [np.concatenate([[0.0], stored[i].numpy()]) for i in range(4)]
    batch = TrainingBatch.build(seqs, behaviour, [len(prompt.input_ids)] * 4, [1.0, 0.0, 1.0, 0.0], ["g", "g", "g", "g"], [0] * 4)
    assert batch.advantages[0] > 0 > batch.advantages[1]
    stats = grpo_step(model, torch.optim.Adam(model.parameters(), lr=1e-3), batch, UpdateOptions(updates=2))
    assert stats.loss == pytest.approx(0.0, abs=1e-6)  # on policy, advantages sum to 0
    with torch.no_grad():
        after = (token_logprobs(model, tokens) * mask).sum(-1)
    assert after[0] > before[0] and after[1] < before[1]


# -- staleness -------------------------------------------------------------------------------


def test_inherent_staleness_uses_the_version_of_the_trainer_at_completion():
    clock = VersionClock()
    clock.published(5, 1000.0)
    clock.published(6, 2000.0)
    clock.published(7, 3000.0)
    assert [clock.version_at(t) for t in (10.0, 1000.0, 1999.0, 2000.0, 9999.0)] == [5, 5, 5, 6, 7]
    # completed at 2500 (trainer at 6) on version 4: 2; at 3500 on 7: 0; before the run on 3: 2;
    # an engine that saw version 7 a moment before the trainer logged it: 0, not -1.
    assert clock.inherent([2500.0, 3500.0, 500.0, 2999.0], [4, 7, 3, 7]).tolist() == [2, 0, 2, 0]
    with pytest.raises(ValueError):
        clock.published(7, 4000.0)
    assert summary([0, 1, 1, 3]) == {"p50": 1.0, "max": 3, "mean": 1.25}


# -- the trainer against real services ---------------------------------------------------------

_names = itertools.count(1)
GROUP = 4
BATCH = 8  # two groups per step


@pytest.fixture
def shm_dir() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="laminar-py-grpo-", dir="/dev/shm")
    yield d
    remove_shm_dir(d)


@pytest.fixture
def sampler_service(nats_server, shm_dir: str) -> Iterator[SamplerService]:
    buffer = f"grpo{os.getpid()}x{next(_names)}"
    service = SamplerService(nats_server.url, shm_dir, ["--buffer", buffer, "--batch-size", str(BATCH), "--strategy", "groups", "--prefetch", "off"])
    service.buffer = buffer  # type: ignore[attr-defined]
    yield service.start()
    service.kill()


def groups_of_records(first_group: int, count: int, weight_version: int, rng: np.random.Generator) -> List[dict]:
    """``count`` groups of GROUP records as a rollout writes them: a digits prompt, a sampled
    response, logprobs of the response tokens (0 on the prompt), the reward, completed now."""
    out = []
    now = time.time() * 1000.0
    for g in range(first_group, first_group + count):
        prompt = make_prompt("repeat", "".join(str(d) for d in rng.integers(0, 10, 3)))
        for k in range(GROUP):
            response = [int(t) for t in rng.integers(4, 14, 3)] + [EOS]
            right = sum(1 for a, b in zip(response, prompt.target) if a == b)
            tokens = prompt.input_ids + response
            logprobs = [0.0] * len(prompt.input_ids) + [float(x) for x in -rng.uniform(0.5, 3.0, len(response))]
            out.append(
                {
                    "id": f"traj-{g}-{k}",
                    "promptId": f"prompt-{g}",
                    "groupId": f"group-{g}",
                    "sampleIndex": k,
                    "groupSize": GROUP,
                    "weightVersion": weight_version,
                    "reward": right / 3 if k else 1.0,  # never a zero-variance group
                    "tokens": tokens,
                    "logprobs": logprobs,
                    "promptLength": len(prompt.input_ids),
                    "responseLength": len(response),
                    "createdAt": now - 50.0,
                    "completedAt": now,
                }
            )
    return out


def metrics_lines(path: Path) -> List[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class TrainerRun:
    """trainer.py as a child process, its output collected line by line by a thread."""

    def __init__(self, argv: List[str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: List[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True, name="trainer-output")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_line(self, text: str, timeout: float = 60.0) -> None:
        """Waits until a line holding ``text`` is printed; fails if the trainer exits first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    raise AssertionError(f"the trainer printed no {text!r}:\n{self.output}")
                self._changed.wait(left)

    def finish(self, timeout: float = 120.0) -> int:
        """Waits for the exit; kills it past ``timeout``. Returns the exit code."""
        try:
            return self.proc.wait(timeout)
        finally:
            self.stop()
            self._reader.join(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def trainers() -> Iterator[Callable[..., TrainerRun]]:
    """Starts trainer.py against a relay and a sampler service; every one is killed after the test."""
    made: List[TrainerRun] = []

    def start(relay: Any, service: SamplerService, metrics: Path, model: str, *extra: str) -> TrainerRun:
        argv = [sys.executable, str(TRAINER), "--relay-socket", relay.socket_path, "--sampler-socket", service.socket_path, "--model", model]
        run = TrainerRun([*argv, "--metrics-out", str(metrics), "--sample-timeout", "60", *extra])
        made.append(run)
        return run

    yield start
    for run in made:
        run.stop()


def test_the_trainer_trains_on_sampled_groups_and_publishes_every_step(nats_server, relay_factory, sampler_service, trainers, tmp_path):
    engine_files = tmp_path / "engine"
    model = "digits/test"
    written = subprocess.run(
        [sys.executable, str(TRAINER), "--engine-files", str(engine_files), "--engine-files-only"], capture_output=True, text=True, timeout=60
    )
    assert written.returncode == 0, written.stdout + written.stderr
    assert json.loads((engine_files / "config.json").read_text())["d_model"] == PRESETS["tiny"].d_model
    relay = relay_factory(["--no-pin", "--engine-files", str(engine_files)])
    rng = np.random.default_rng(7)
    metrics = tmp_path / "metrics.jsonl"
    with RelayClient(relay.socket_path) as client, SyncExperienceWriter.connect(nats_server.url, sampler_service.buffer) as writer:  # type: ignore[attr-defined]
        versions = client.watch(model, replay=True)
        # Step 1's groups complete before the trainer starts (inherent staleness 0 by definition).
        writer.write_many(groups_of_records(0, 2, weight_version=0, rng=rng))
        trainer = trainers(relay, sampler_service, metrics, model, "--steps", "3")
        # The groups of steps 2 and 3 complete while the trainer is at version 1 (its step line is
        # printed once version 1 is its own; both are stamped now, before step 2 can publish
        # version 2): step 2's were generated on version 0, step 3's on version 1. Written one
        # pair after the other, so that the sampler (oldest groups first) takes them in this order.
        trainer.wait_line("step    1 v1 ")
        second, third = groups_of_records(2, 2, weight_version=0, rng=rng), groups_of_records(4, 2, weight_version=1, rng=rng)
        writer.write_many(second)
        writer.write_many(third)
        assert trainer.finish() == 0, trainer.output
        seen = []
        for event in versions:
            seen.append(event.version)
            if event.version == 3:
                break
        versions.close()
        assert seen == [0, 1, 2, 3]
        with client.acquire(model) as lease:
            assert lease.version == 3
            # The version directory is a model directory: config.json from --engine-files and the weights.
            assert lease.dir is not None and os.path.exists(os.path.join(lease.dir, "config.json"))
            loaded = load_model(lease.dir)
            assert loaded.config == PRESETS["tiny"]
    lines = metrics_lines(metrics)
    assert [r["step"] for r in lines] == [1, 2, 3] and [r["version"] for r in lines] == [1, 2, 3]
    for r in lines:
        assert r["items"] == BATCH and r["groups"] == 2 and r["response_tokens"] == BATCH * 4
        for key in ("reward_mean", "loss", "staleness_p50", "staleness_max", "inherent_p50", "inherent_max", "publish_stall_ms", "sample_wait_ms", "time", "t"):
            assert isinstance(r[key], (int, float)), key
        assert r["publish_stall_ms"] > 0
    # Consumption: trained version - generating version. Inherent: version at completion -
    # generating version; step 3's records waited a version in the buffer, which only the first counts.
    assert [(r["staleness_max"], r["inherent_max"]) for r in lines] == [(0, 0), (1, 1), (1, 0)]
    assert [r["weight_version_max"] for r in lines] == [0, 0, 1]
    assert "done after 3 steps; last version 3" in trainer.output


def test_the_trainer_publishes_again_into_a_restarted_relay(nats_server, relay, sampler_service, trainers, tmp_path):
    model = "digits/restart"
    rng = np.random.default_rng(8)
    with SyncExperienceWriter.connect(nats_server.url, sampler_service.buffer) as writer:  # type: ignore[attr-defined]
        writer.write_many(groups_of_records(0, 2, weight_version=0, rng=rng))
        trainer = trainers(relay, sampler_service, tmp_path / "metrics.jsonl", model, "--steps", "2")
        trainer.wait_line("step    1 v1 ")
        relay.kill()
        writer.write_many(groups_of_records(2, 2, weight_version=1, rng=rng))
        trainer.wait_line("relay away")
        relay.start()
        assert trainer.finish() == 0, trainer.output
    with RelayClient(relay.socket_path) as client, client.acquire(model) as lease:
        assert lease.version == 2
    assert "done after 2 steps; last version 2" in trainer.output


def test_a_trainer_started_at_a_version_the_relay_holds_goes_on_from_its_weights(nats_server, relay, sampler_service, trainers, tmp_path):
    model = "digits/resume"
    earlier = build_model(PRESETS["tiny"], seed=42)  # what an earlier run published as version 5
    with RelayClient(relay.socket_path) as client:
        client.publish(model, 5, earlier.state_dict()).wait_visible(timeout=60)
        with SyncExperienceWriter.connect(nats_server.url, sampler_service.buffer) as writer:  # type: ignore[attr-defined]
            writer.write_many(groups_of_records(0, 2, weight_version=5, rng=np.random.default_rng(9)))
        metrics = tmp_path / "metrics.jsonl"
        metrics.write_text('{"step": 5, "version": 5, "reward_mean": 0.5}\n')  # the earlier run's lines stay
        trainer = trainers(relay, sampler_service, metrics, model, "--steps", "1", "--start-version", "5", "--seed", "0")
        assert trainer.finish() == 0, trainer.output
        assert "resumed from version 5 held by the relay" in trainer.output
        with client.acquire(model) as lease:
            assert lease.version == 6
            after = {name: t.clone() for name, t in lease.torch().items()}
    # One step (4 Adam updates of lr 1e-3, each moving a weight by about lr at most) from the
    # relay's weights, not from --seed 0's (two inits of std 0.02 differ by ~0.1 somewhere).
    fresh = build_model(PRESETS["tiny"], seed=0).state_dict()
    for name, tensor in earlier.state_dict().items():
        assert float((after[name] - tensor).abs().max()) < 0.01, name
    assert float((after["lm_head.weight"] - fresh["lm_head.weight"]).abs().max()) > 0.03
    assert [r["version"] for r in metrics_lines(metrics)] == [5, 6]


def test_with_lora_rank_only_the_adapter_trains_and_each_version_is_an_adapter(nats_server, relay, sampler_service, trainers, tmp_path):
    """--lora-rank: the base is published once (version 0 of --model) with the untrained adapter
    (version 0 of --lora-model: B = 0), then every step's adapter as a version of --lora-model in
    PEFT's layout, which the reference engine's loader takes against that base; the base itself
    never moves."""
    model = "digits/lora"
    with SyncExperienceWriter.connect(nats_server.url, sampler_service.buffer) as writer:  # type: ignore[attr-defined]
        writer.write_many(groups_of_records(0, 4, weight_version=0, rng=np.random.default_rng(11)))
    metrics = tmp_path / "metrics.jsonl"
    trainer = trainers(relay, sampler_service, metrics, model, "--steps", "2", "--lora-rank", "4", "--lora-targets", "qkv,fc_out,lm_head")
    assert trainer.finish() == 0, trainer.output
    assert "LoRA r 4 published as digits/lora-lora" in trainer.output
    base = build_model(PRESETS["tiny"], seed=0)
    with RelayClient(relay.socket_path) as client:
        with client.acquire(model) as lease:
            assert lease.version == 0  # no full version after the initial one
            for name, tensor in lease.torch().items():
                assert torch.equal(tensor, base.state_dict()[name]), name
        # Version 0 of the adapter model: the untrained adapter, which rollouts start from.
        with client.acquire(f"{model}-lora", version=0) as lease:
            assert lease.dir is not None
            untrained = read_lora_adapter(lease.dir, base)
        assert all(float(b.abs().max()) == 0 for _, b in untrained.modules.values())
        with client.acquire(f"{model}-lora") as lease:
            assert lease.version == 2 and lease.dir is not None
            adapter = read_lora_adapter(lease.dir, base)
            config = json.loads(Path(lease.dir, "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["target_modules"]) == (4, 4.0, ["qkv", "fc_out", "lm_head"])
    assert sorted(adapter.modules) == ["layers.0.attn.qkv", "layers.0.mlp.fc_out", "layers.1.attn.qkv", "layers.1.mlp.fc_out", "lm_head"]
    # Trained: B started at zero (the adapted model equal to the base) and moved.
    assert all(float(b.abs().max()) > 0 for _, b in adapter.modules.values())
    assert [r["version"] for r in metrics_lines(metrics)] == [1, 2]


def test_the_trainer_stops_cleanly_on_sigterm_while_waiting_for_a_batch(relay, sampler_service, trainers, tmp_path):
    trainer = trainers(relay, sampler_service, tmp_path / "metrics.jsonl", "digits/sigterm", "--steps", "5")
    # Version 0 published: the trainer is now waiting for a batch that never comes.
    trainer.wait_line("published version 0")
    trainer.proc.send_signal(signal.SIGTERM)
    assert trainer.finish(60) == 0, trainer.output
    assert "stopped by SIGTERM after 0 steps; last version 0" in trainer.output
    # It closed its sampler connection: the service counts only ours.
    with Sampler(sampler_service.socket_path) as sampler:
        deadline = time.monotonic() + 30
        while sampler.stats()["connections"] != 1:
            assert time.monotonic() < deadline, sampler.stats()
            time.sleep(0.05)


def test_bad_arguments_exit_2_with_the_flag_named():
    # Side by side: each run is mostly trainer.py importing torch, 2 s of one core apiece.
    runs = {
        args: subprocess.Popen([sys.executable, str(TRAINER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for args in (("--config", "huge"), ("--lora-alpha", "8"), ("--lora-rank", "-1"), ("--help",))
    }
    out = {args: (*run.communicate(timeout=60), run.returncode) for args, run in runs.items()}
    for args, words in (
        (("--config", "huge"), "--config 'huge'"),
        (("--lora-alpha", "8"), "--lora-alpha needs --lora-rank"),
        (("--lora-rank", "-1"), "--lora-rank must be >= 0"),
    ):
        _, stderr, code = out[args]
        assert code == 2 and words in stderr, stderr
    help_text, _, code = out[("--help",)]
    assert code == 0
    for flag in (
        "--relay-socket",
        "--model",
        "--sampler-socket",
        "--steps",
        "--lr",
        "--clip",
        "--seed",
        "--metrics-out",
        "--config",
        "--start-version",
        "--lora-rank",
    ):
        assert flag in help_text
