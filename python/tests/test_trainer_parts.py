"""A trainer whose tensors live on two hosts publishes one version from both at once: each host's
Python trainer publishes its half of the state_dict into the forwarding relay on its host with
``part=(k, 2)`` and the whole version's specs; each forwarding relay pushes its part to the
master, which serves the version, every tensor in place, once both parts are in."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import laminar  # noqa: E402

from relay_process import RelayFactory  # noqa: E402
from test_trainer_forwarding import SECRET, free_port, holds, manager, wait_until  # noqa: E402, F401

MODEL = "org/sharded-policy"


def test_two_hosts_publish_one_version_through_their_forwarding_relays(nats_server, manager, relay_factory: RelayFactory):  # noqa: F811
    control = ["--nats", nats_server.url, "--job", "pyfw", "--heartbeat", "100ms"]
    env = {"LAMINAR_SECRET": SECRET}
    master = relay_factory(["--no-pin", "--id", "r0", "--host", "host0", "--listen", f"127.0.0.1:{free_port()}", *control], env=env)
    gateways = [relay_factory(["--no-pin", "--forward", "--id", f"trainer-{k}", "--host", f"trainer{k}", *control], env=env) for k in range(2)]
    for gateway in gateways:
        wait_until("the forwarders to start", lambda: gateway.logged("forwarding every version"))

    model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.Linear(64, 8)).to(torch.bfloat16)
    state = model.state_dict()
    manifest = laminar.relay.specs_of(state)
    names = list(state)
    halves = [{n: state[n] for n in names[: len(names) // 2]}, {n: state[n] for n in names[len(names) // 2 :]}]
    for k, gateway in enumerate(gateways):
        with laminar.RelayClient(gateway.socket_path, name=f"trainer-{k}") as trainer:
            trainer.publish(MODEL, 1, halves[k], part=(k + 1, 2), manifest=manifest).wait_visible(timeout=30)
    wait_until("the master to serve the version", lambda: holds(master, 1))
    with laminar.RelayClient(master.socket_path) as rollout, rollout.acquire(MODEL, version=1) as lease:
        got = lease.torch()
        assert list(got) == names
        for name, tensor in state.items():
            assert torch.equal(got[name].view(torch.int16), tensor.view(torch.int16)), name
        assert "laminar.part" not in lease.metadata

    with pytest.raises(laminar.LaminarError) as refused:
        with laminar.RelayClient(gateways[0].socket_path) as trainer:
            trainer.publish(MODEL, 2, halves[0], part=(1, 2))
    assert refused.value.code == "ERR_INVALID_ARG"
