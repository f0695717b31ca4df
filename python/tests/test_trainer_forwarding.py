"""A PyTorch trainer's path to the master, end to end with real processes: the trainer publishes
a state_dict into the forwarding relay on its host (``laminar relay --forward``); the relay
pushes it to the master of the manager's chain, which broadcasts it on; after the master is
killed, the trainer's next publish still just returns, and the version reaches the new master.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from typing import Callable

import pytest

torch = pytest.importorskip("torch")

import laminar  # noqa: E402

from relay_process import CLI, NODE, RelayFactory, RelayProcess  # noqa: E402

SECRET = "python-forwarding-test-secret-0123456789"
MODEL = "org/policy"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, predicate: Callable[[], bool], timeout: float = 60.0) -> None:
    """Polls ``predicate`` until it holds; the timeout only bounds a failing test."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def holds(relay: RelayProcess, version: int) -> bool:
    try:
        with laminar.RelayClient(relay.socket_path, reconnect=False) as client:
            return any(v["version"] == version and v["state"] == "complete" for v in client.status()["versions"])
    except laminar.LaminarError:
        return False


def position(relay: RelayProcess) -> int:
    with laminar.RelayClient(relay.socket_path, reconnect=False) as client:
        return client.status()["broadcast"]["position"]


@pytest.fixture
def manager(nats_server, tmp_path):
    log = open(tmp_path / "manager.log", "w")
    process = subprocess.Popen(
        [
            NODE,
            str(CLI),
            "manager",
            "--nats",
            nats_server.url,
            "--job",
            "pyfw",
            "--http-port",
            "-1",
            "--lease",
            "1s",
            "--suspect-after",
            "400ms",
            "--dead-after",
            "1s",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    yield process
    process.kill()
    process.wait()
    log.close()


def test_a_python_trainer_publishes_through_the_forwarding_relay_across_a_master_change(nats_server, manager, relay_factory: RelayFactory):
    control = ["--nats", nats_server.url, "--job", "pyfw", "--heartbeat", "100ms"]
    env = {"LAMINAR_SECRET": SECRET}
    chain = [relay_factory(["--no-pin", "--id", f"r{i}", "--host", f"host{i}", "--listen", f"127.0.0.1:{free_port()}", *control], env=env) for i in range(2)]
    gateway = relay_factory(["--no-pin", "--forward", "--id", "trainer-gw", "--host", "trainer", *control], env=env)
    wait_until("the forwarder to start", lambda: gateway.logged("forwarding every version"))

    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(torch.bfloat16)
    with laminar.RelayClient(gateway.socket_path, name="trainer") as trainer:
        trainer.publish(MODEL, 1, model.state_dict())
        wait_until("v1 on both relays of the chain", lambda: holds(chain[0], 1) and holds(chain[1], 1))
        with laminar.RelayClient(chain[1].socket_path) as rollout, rollout.acquire(MODEL, version=1) as lease:
            got = lease.torch()
            for name, tensor in model.state_dict().items():
                assert torch.equal(got[name].view(torch.int16), tensor.view(torch.int16)), name

        # The master (position 0 of the plan in force) is killed; the other relay becomes master.
        master = next(r for r in chain if position(r) == 0)
        survivor = next(r for r in chain if r is not master)
        master.kill(signal.SIGKILL)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1)
        trainer.publish(MODEL, 2, model.state_dict())  # local: the master change never reaches it
        wait_until("v2 at the new master", lambda: holds(survivor, 2))
        wait_until("the survivor to be master", lambda: position(survivor) == 0)
    assert gateway.logged('"version":2') and gateway.logged("version forwarded to the master")
