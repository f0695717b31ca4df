"""A GRPO trainer for the digits task on laminar: whole groups in from the sampler service, new
weights out through the relay after every step.

    laminar relay --engine-files /tmp/digits-engine ...            # config.json from --engine-files below
    laminar sampler --nats URL --batch-size 64 --strategy groups --max-staleness 4 ...
    .venv/bin/python python/examples/grpo_digits/trainer.py --steps 150 --metrics-out /tmp/grpo.jsonl

At start it builds a TinyLM (or, with ``--config llama``, the Llama a vLLM serves:
llama_policy.py, run with .venv-engines' Python) from ``--seed`` and publishes it as ``--start-version`` (or, when the
relay already holds that version of ``--model``, takes its weights from there: a restarted
trainer goes on from what it published). Each step:

1. samples a batch of whole GRPO groups (``laminar.data.Sampler``; the service runs with
   ``--strategy groups``, the group size comes from the records);
2. normalises the stored rewards per group into advantages;
3. recomputes the policy's logprobs of the response tokens and takes ``--updates`` optimiser
   steps on the clipped GRPO loss, the importance ratio taken against the logprobs the engine
   stored (the behaviour policy, possibly several versions old: the asynchronous setting);
4. publishes the weights as the next version (``RelayClient.publish``) and tells the sampler the
   trainer's version (``set_trainer_version``); with ``--lora-rank`` only a LoRA adapter trains (the
   base frozen: lora_setup.py) and each version is the adapter, published as a version of
   ``--lora-model`` (``RelayClient.publish_lora``, PEFT's layout) whose base is ``--model``
   version ``--start-version``, the untrained adapter (B = 0) being version ``--start-version``
   of it, so that rollouts following the adapter model can start;
5. logs one JSON line (``--metrics-out``, fields in step_metrics.py) and a readable line.

SIGTERM or SIGINT: the step in progress finishes (its version published), then the sampler and
the relay client are closed and the trainer exits 0. Exit 1 on an error, 2 on bad arguments.
"""

from __future__ import annotations

import os

# Before numpy and torch load it: Debian's OpenBLAS (numpy's and torch's BLAS here) otherwise
# starts a thread per core that spins between calls; torch.set_num_threads (--threads) does not
# reach it. On the demo's 2 cores that cost ~40% more CPU, in system time. Set the variable to
# allow more.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import copy
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from grpo_update import UpdateOptions, grpo_step
from lora_setup import DEFAULT_LORA_LR, add_lora_arguments, lora_config, lora_policy
from model_setup import DEFAULT_PRESET, LLAMA_PRESET, PRESETS, build_model, resolve_config, validate_tensors, write_engine_files
from staleness import VersionClock, summary
from step_metrics import MetricsLog
from training_batch import TrainingBatch

import laminar
from laminar import error_codes
from laminar.data import Sampler, default_socket_path
from laminar.errors import ClosedError, LaminarError, LaminarTimeoutError

DEFAULT_MODEL = "digits/tiny"
DEFAULT_STEPS = 150
DEFAULT_LR = 1e-3
#: How long one sample() waits before the trainer looks at its stop flag again.
SAMPLE_SLICE_SECONDS = 1.0
#: Between attempts to publish into a relay that went away (a reconnect is one request).
RELAY_RETRY_PAUSE_SECONDS = 0.5


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="trainer.py",
        description="GRPO trainer for the digits task: samples whole groups from laminar's sampler service, publishes every step's weights through the relay.",
        epilog="Metrics fields: see step_metrics.py. The example's README.md says how the demo runs it.",
    )
    where = p.add_argument_group("where")
    where.add_argument("--relay-socket", help="the relay's unix socket (default: $LAMINAR_RELAY_SOCKET, else /dev/shm/laminar/relay.sock)")
    where.add_argument("--sampler-socket", help=f"the sampler service's socket (default: laminar.data.default_socket_path(), now {default_socket_path()})")
    where.add_argument("--model", default=DEFAULT_MODEL, help="model name the versions are published under (default %(default)s)")
    where.add_argument("--metrics-out", help="write one JSON line per step to this file (emptied at start; a resumed run appends)")
    where.add_argument(
        "--engine-files",
        metavar="DIR",
        help="write the model's config.json into DIR first; start the relay with --engine-files DIR so that every version directory holds it",
    )
    where.add_argument("--engine-files-only", action="store_true", help="write --engine-files and exit (run it before starting the relay)")
    model = p.add_argument_group("model and optimiser")
    model.add_argument(
        "--config",
        default=DEFAULT_PRESET,
        help=f"model: a TinyLM preset ({', '.join(PRESETS)}), a TinyLM config.json path, or {LLAMA_PRESET} "
        "(a Hugging Face Llama for vLLM engines; needs transformers) (default %(default)s)",
    )
    model.add_argument("--seed", type=int, default=0, help="seed of the initial weights (default %(default)s)")
    model.add_argument("--lr", type=float, help=f"Adam learning rate (default {DEFAULT_LR}; {DEFAULT_LORA_LR} with --lora-rank)")
    model.add_argument("--clip", type=float, default=0.2, help="PPO clip: the importance ratio is held to [1-clip, 1+clip] (default %(default)s)")
    model.add_argument("--updates", type=int, default=4, help="optimiser updates per batch (PPO epochs; default %(default)s)")
    model.add_argument("--kl-coef", type=float, default=0.0, help="weight of a KL term to the initial policy (default %(default)s: off)")
    model.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient norm cap (default %(default)s)")
    run = p.add_argument_group("run")
    run.add_argument("--steps", type=int, default=DEFAULT_STEPS, help="steps to take, each publishing one version (default %(default)s)")
    run.add_argument(
        "--start-version",
        type=int,
        default=0,
        help="version of the initial weights: the relay's when it holds this version of --model (a resumed run), else the --seed init "
        "published as it; step k publishes start + k (default %(default)s)",
    )
    run.add_argument("--sample-timeout", type=float, default=300.0, help="seconds to wait for a batch before giving up with exit 1 (default %(default)s)")
    run.add_argument(
        "--relay-retry", type=float, default=60.0, help="seconds to wait for a relay that went away before giving up with exit 1 (default %(default)s)"
    )
    run.add_argument("--threads", type=int, default=1, help="torch threads: the demo's host has 2 cores shared with relays and engines (default %(default)s)")
    add_lora_arguments(p)
    p.add_argument("--lora-model", help="with --lora-rank: the model name the adapter versions are published under (default: --model followed by '-lora')")
    args = p.parse_args(argv)
    args.lora = lora_config(args, p, base_name=args.model)
    if args.lora_model is None:
        args.lora_model = f"{args.model}-lora"
    if args.lr is None:
        args.lr = DEFAULT_LORA_LR if args.lora else DEFAULT_LR
    if args.steps < 0:
        p.error("--steps must be >= 0")
    if args.start_version < 0:
        p.error("--start-version must be >= 0")
    for name in ("updates", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.relay_retry < 0:
        p.error("--relay-retry must be >= 0")
    for name in ("lr", "clip", "sample_timeout", "max_grad_norm"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    if args.kl_coef < 0:
        p.error("--kl-coef must be >= 0")
    if args.engine_files_only and not args.engine_files:
        p.error("--engine-files-only needs --engine-files DIR")
    try:
        args.model_config = resolve_config(args.config)
    except LaminarError as err:
        p.error(err.message)
    return args


class StopFlag:
    """Set by SIGTERM/SIGINT; the loop looks at it between steps and while waiting for a batch."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signal: Optional[str] = None

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        self.signal = signal.Signals(signum).name
        self.event.set()

    @property
    def stopped(self) -> bool:
        return self.event.is_set()


class GrpoTrainer:
    """The loop of the module docstring, over a connected relay client and sampler."""

    def __init__(self, args: argparse.Namespace, relay: laminar.RelayClient, sampler: Sampler, stop: StopFlag) -> None:
        self.args = args
        self.relay = relay
        self.sampler = sampler
        self.stop = stop
        self.base = build_model(args.model_config, args.seed)
        """The model of version --start-version: with --lora-rank, frozen under the adapter."""
        self.policy = lora_policy(self.base, args.lora) if args.lora else self.base
        self.optimizer = torch.optim.Adam(self.policy.trainable_parameters() if args.lora else self.policy.parameters(), lr=args.lr)
        self.options = UpdateOptions(clip=args.clip, updates=args.updates, max_grad_norm=args.max_grad_norm, kl_coef=args.kl_coef)
        self.clock = VersionClock()
        self.version = args.start_version
        self.resumed = False
        self.reference: Optional[torch.nn.Module] = None
        self.started = time.monotonic()
        #: The version published last, verified by the relay while the next step trains.
        self.last_publish: Optional[laminar.PublishResult] = None

    def start(self) -> None:
        """Version ``--start-version``: the relay's, if it holds it, else the seed's, published."""
        self.resumed = self._load_from_relay(self.version)
        if self.resumed:
            # Its publish time is unknown: count it as the trainer's from now on.
            self.clock.published(self.version, time.time() * 1000.0)
            print(f"resumed from version {self.version} held by the relay", flush=True)
        else:
            stall = self._publish(self.version)
            print(f"published version {self.version} (initial weights, seed {self.args.seed}) in {stall:.1f}ms", flush=True)
        if self.args.lora is not None:
            self._publish_untrained_adapter()
        if self.args.kl_coef:
            self.reference = copy.deepcopy(self.base).eval()
        self.sampler.set_trainer_version(self.version)

    def _publish_untrained_adapter(self) -> None:
        """With ``--lora-rank``: the adapter before any step (B = 0, so the policy is the base) as
        version ``--start-version`` of ``--lora-model``. Rollouts that follow the adapter model
        wait for a version of it, and the first batch needs their trajectories: without it neither
        would start. Already there (a trainer restarted on the same relay): the same adapter,
        made from the same seed, is kept."""
        self.settle()  # the base complete on the relay first: an adapter is checked against it
        try:
            self._send_adapter(self.version).wait_visible()
        except LaminarError as err:
            if err.code != error_codes.VERSION_EXISTS:
                raise
        print(f"published version {self.version} of {self.args.lora_model} (the untrained adapter: the policy equals the base)", flush=True)

    def _load_from_relay(self, version: int) -> bool:
        try:
            lease = self.relay.acquire(self.args.model, version=version)
        except LaminarError as err:
            if err.code in (error_codes.UNKNOWN_MODEL, error_codes.UNKNOWN_VERSION):
                return False
            raise
        with lease:
            tensors = lease.torch()
            validate_tensors(tensors, self.base)
            self.base.load_state_dict(tensors)  # copies out of the shared memory
        return True

    def _publish(self, version: int) -> float:
        """Publishes the weights as ``version``; returns the stall in ms (retries included).

        A relay that went away (killed, restarting: ``ERR_CLOSED``) is waited for up to
        ``--relay-retry`` seconds, then the version is published again. When the lost attempt
        had committed, the restarted relay recovered it and answers ``ERR_VERSION_EXISTS``:
        published, then. ``publish`` returns once the bytes are in the relay's segment; the
        relay's verdict on the version is looked at before the next one (``settle``)."""
        self.settle()
        began = time.perf_counter()
        deadline = time.monotonic() + self.args.relay_retry
        retried = False
        while True:
            try:
                self.last_publish = self._send(version)
                break
            except LaminarError as err:
                if retried and err.code == error_codes.VERSION_EXISTS:
                    break
                if err.code != error_codes.CLOSED or time.monotonic() > deadline:
                    raise
                if not retried:
                    print(f"relay away ({err.message}); publishing version {version} again when it is back", flush=True)
                retried = True
                time.sleep(RELAY_RETRY_PAUSE_SECONDS)
        stall = (time.perf_counter() - began) * 1000.0
        self.clock.published(version, time.time() * 1000.0)
        return stall

    def _send(self, version: int) -> laminar.PublishResult:
        """Version ``version``: the whole model, or (``--lora-rank``, after the base) the adapter."""
        if self.args.lora is None or version == self.args.start_version:
            return self.relay.publish(self.args.model, version, self.base.state_dict())
        return self._send_adapter(version)

    def _send_adapter(self, version: int) -> laminar.PublishResult:
        return self.relay.publish_lora(
            self.args.lora_model,
            version,
            self.policy.adapter.peft_state_dict(),
            config=self.args.lora.to_json(),
            base_model=self.args.model,
            base_version=self.args.start_version,
        )

    def settle(self) -> None:
        """Waits for the relay's verdict on the version published last (by now it is usually in:
        the relay verified it while the step trained). A version the relay refused raises; one
        lost with a relay that went away before verifying it is superseded by the next."""
        last, self.last_publish = self.last_publish, None
        if last is None:
            return
        try:
            last.wait_visible()
        except ClosedError as err:
            print(f"version {last.version} was lost with the relay before it was verified ({err.message}); the next version supersedes it", flush=True)

    def _sample(self) -> tuple[Optional[TrainingBatch], float]:
        """The next batch as tensors (the shared batch released at once), and the wait in ms;
        None when a stop came first. Raises ``ERR_TIMEOUT`` after ``--sample-timeout``."""
        began = time.perf_counter()
        deadline = time.monotonic() + self.args.sample_timeout
        while not self.stop.stopped:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LaminarTimeoutError(error_codes.TIMEOUT, f"no batch from the sampler service in {self.args.sample_timeout:g}s (are rollouts writing?)")
            try:
                batch = self.sampler.sample(timeout=min(SAMPLE_SLICE_SECONDS, left))
            except LaminarTimeoutError:
                continue
            with batch:
                training = TrainingBatch.from_sampler_batch(batch)
            return training, (time.perf_counter() - began) * 1000.0
        return None, (time.perf_counter() - began) * 1000.0

    def step(self, step: int) -> Optional[dict[str, Any]]:
        """One step; its metrics record, or None when a stop came while waiting for the batch."""
        batch, wait_ms = self._sample()
        if batch is None:
            return None
        trained_version = self.version
        began = time.perf_counter()
        stats = grpo_step(self.policy, self.optimizer, batch, self.options, self.reference)
        train_ms = (time.perf_counter() - began) * 1000.0
        self.version += 1
        stall = self._publish(self.version)
        self.sampler.set_trainer_version(self.version)
        consumption = summary(trained_version - batch.weight_versions)
        inherent = summary(self.clock.inherent(batch.completed_at, batch.weight_versions))
        return {
            "step": step,
            "version": self.version,
            "time": round(time.time(), 3),
            "t": round(time.monotonic() - self.started, 3),
            "reward_mean": round(float(batch.rewards.mean()), 5),
            "reward_std": round(float(batch.rewards.std()), 5),
            "items": batch.size,
            "groups": batch.groups,
            "response_tokens": batch.response_tokens,
            "loss": round(stats.loss, 6),
            "kl": round(stats.kl, 6),
            "clip_fraction": round(stats.clip_fraction, 4),
            "behaviour_kl": round(stats.behaviour_kl, 6),
            "grad_norm": round(stats.grad_norm, 4),
            "staleness_p50": consumption["p50"],
            "staleness_max": consumption["max"],
            "staleness_mean": consumption["mean"],
            "inherent_p50": inherent["p50"],
            "inherent_max": inherent["max"],
            "inherent_mean": inherent["mean"],
            "weight_version_min": int(batch.weight_versions.min()),
            "weight_version_max": int(batch.weight_versions.max()),
            "sample_wait_ms": round(wait_ms, 2),
            "train_ms": round(train_ms, 2),
            "publish_stall_ms": round(stall, 3),
        }

    def run(self, log: MetricsLog) -> int:
        """Steps until ``--steps`` or a stop; returns the number of steps taken."""
        taken = 0
        for step in range(1, self.args.steps + 1):
            if self.stop.stopped:
                break
            record = self.step(step)
            if record is None:
                break
            log.write(record)
            taken = step
        return taken


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    if args.engine_files:
        path = write_engine_files(args.engine_files, args.model_config)
        print(f"wrote {path}", flush=True)
        if args.engine_files_only:
            return 0
    torch.set_num_threads(args.threads)
    stop = StopFlag()
    stop.install()
    relay: Optional[laminar.RelayClient] = None
    sampler: Optional[Sampler] = None
    log: Optional[MetricsLog] = None
    try:
        relay = laminar.RelayClient(args.relay_socket, name="grpo-digits-trainer")
        sampler = Sampler(args.sampler_socket)
        trainer = GrpoTrainer(args, relay, sampler, stop)
        params = sum(p.numel() for p in trainer.base.parameters())
        lora = f", LoRA r {args.lora.r} published as {args.lora_model}" if args.lora else ""
        print(
            f"grpo trainer: model {args.model} ({args.config}, {params} parameters{lora}), relay {relay.relay_id}, sampler batch {sampler.batch_size}",
            flush=True,
        )
        trainer.start()
        log = MetricsLog(args.metrics_out, sys.stdout, append=trainer.resumed)
        taken = trainer.run(log)
        trainer.settle()  # the last version served before the trainer says it is done
        why = f"stopped by {stop.signal}" if stop.stopped else "done"
        print(f"{why} after {taken} steps; last version {trainer.version}", flush=True)
        return 0
    except LaminarError as err:
        print(f"trainer failed: {err.code}: {err.message}", file=sys.stderr, flush=True)
        return 1
    finally:
        if log is not None:
            log.close()
        if sampler is not None:
            sampler.close()
        if relay is not None:
            relay.close()


if __name__ == "__main__":
    sys.exit(main())
