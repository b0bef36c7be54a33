"""FedAvg by hand, client splits, the simulated federation and the cost model (course_lib.parallel.federated)."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch

from course_lib import catalog, cost, data, models, seeds
from course_lib.parallel import federated as fed


def _state(value: float, shape=(2, 3)) -> dict[str, torch.Tensor]:
    return {"w": torch.full(shape, value), "b": torch.full((3,), value), "n": torch.tensor(int(value))}


# --- fedavg -------------------------------------------------------------------------------------------


def test_fedavg_is_the_sample_weighted_mean():
    out = fed.fedavg([_state(1.0), _state(4.0)], [2, 1])  # (2*1 + 1*4) / 3 = 2
    assert torch.allclose(out["w"], torch.full((2, 3), 2.0)) and out["w"].dtype == torch.float32
    assert out["n"].dtype == torch.int64 and int(out["n"]) == 2


def test_fedavg_normalises_weights_and_ignores_zero_weight_clients():
    a = fed.fedavg([_state(1.0), _state(3.0), _state(100.0)], [0.25, 0.25, 0])
    b = fed.fedavg([_state(1.0), _state(3.0)], [10, 10])
    assert torch.equal(a["w"], b["w"]) and torch.allclose(a["w"], torch.full((2, 3), 2.0))


def test_fedavg_of_random_models_matches_a_direct_formula_and_aliases_nothing():
    torch.manual_seed(0)
    states = [models.MLP(8, 5, 3).state_dict() for _ in range(4)]
    w = [3, 1, 7, 2]
    out = fed.fedavg(states, w)
    for k in out:
        expected = sum(wi * s[k] for wi, s in zip(w, states)) / sum(w)
        assert torch.allclose(out[k], expected, atol=1e-6)
        assert all(out[k].data_ptr() != s[k].data_ptr() for s in states)


@pytest.mark.parametrize(
    "states, weights, match",
    [
        ([], [], "empty"),
        ([_state(1.0)], [1, 2], "one entry per state"),
        ([_state(1.0), _state(2.0)], [1, -1], "weights"),
        ([_state(1.0), _state(2.0)], [0, 0], "all zero"),
        ([_state(1.0), {"w": torch.zeros(2, 3), "b": torch.zeros(3)}], [1, 1], "keys"),
        ([_state(1.0), _state(2.0, shape=(3, 2))], [1, 1], "same model"),
        ([_state(1.0), _state(2.0)], [1, float("nan")], "weights"),
    ],
)
def test_fedavg_bad_input(states, weights, match):
    with pytest.raises(ValueError, match=match):
        fed.fedavg(states, weights)


def test_fedavg_type_errors():
    with pytest.raises(TypeError):
        fed.fedavg(_state(1.0), [1])
    with pytest.raises(TypeError):
        fed.fedavg([{"w": [1.0]}], [1])


# --- splits -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", fed.SPLITS)
def test_splits_partition_the_data(how):
    y = torch.arange(10).repeat_interleave(30)
    parts = fed.split_clients(y, 10, how, alpha=0.3, seed=1)
    assert len(parts) == 10 and all(len(p) >= 1 for p in parts)
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(len(y))), "every example exactly once"
    assert [p.tolist() for p in parts] == [p.tolist() for p in fed.split_clients(y, 10, how, alpha=0.3, seed=1)]


def test_label_shards_give_at_most_two_classes_and_iid_gives_all():
    y = torch.arange(10).repeat_interleave(30)
    assert max(fed.classes_per_client(y, fed.split_clients(y, 10, "shards"))) <= 2
    y_big = torch.arange(10).repeat_interleave(100)
    assert min(fed.classes_per_client(y_big, fed.split_clients(y_big, 10, "iid"))) == 10
    few = fed.classes_per_client(y, fed.split_clients(y, 10, "dirichlet", alpha=0.05))
    many = fed.classes_per_client(y, fed.split_clients(y, 10, "dirichlet", alpha=100.0))
    assert sum(few) < sum(many)


def test_split_bad_input():
    y = torch.arange(5)
    with pytest.raises(ValueError, match="num_clients"):
        fed.split_clients(y, 0)
    with pytest.raises(ValueError, match="more than the 5 examples"):
        fed.split_clients(y, 6)
    with pytest.raises(ValueError, match="shards"):
        fed.split_clients(y, 2, "shards", shards_per_client=3)
    with pytest.raises(ValueError, match="how"):
        fed.split_clients(y, 2, "by-country")
    with pytest.raises(ValueError, match="alpha"):
        fed.split_clients(y, 2, "dirichlet", alpha=0)
    with pytest.raises(TypeError):
        fed.split_clients([0, 1, 2], 2)


# --- the simulation -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    split = data.load_digits(fraction=0.3)
    return split, (lambda: models.MLP(64, 16, 10))


def test_one_client_with_all_the_data_is_centralised_training(small):
    split, mf = small
    test = (split.x_test, split.y_test)
    clients = fed.make_clients(split.x_train, split.y_train, [torch.arange(len(split.y_train))], mf)
    f = fed.run_fedavg(mf, clients, test, rounds=3, lr=0.1, batch_size=16)
    c = fed.train_centralised(mf, split.x_train, split.y_train, test, epochs=3, lr=0.1, batch_size=16)
    assert f.acc == pytest.approx(c.acc), "FedAvg of one client, one local epoch per round = plain training"


def test_bytes_counted_and_server_never_reaches_client_data(small):
    split, mf = small
    parts = fed.split_clients(split.y_train, 4, "shards")
    clients = fed.make_clients(split.x_train, split.y_train, parts, mf)
    res = fed.run_fedavg(mf, clients, (split.x_test, split.y_test), rounds=2, fraction=0.5)
    assert res.clients_per_round == 2
    assert res.wire.bytes_down == res.wire.bytes_up == 2 * 2 * res.model_bytes
    assert res.wire.messages == 8 and res.wire.wire_bytes > res.wire.total
    data_tensors = [t for c in clients for t in c.data_tensors()]
    assert not fed.shares_memory(fed.reachable_tensors(res.server), data_tensors)
    assert fed.shares_memory(fed.reachable_tensors(clients), data_tensors)  # the check can see it where it is
    assert sum(t.numel() for t in fed.reachable_tensors(res.server.state)) == res.model_bytes // 4


def test_simulation_bad_input(small):
    split, mf = small
    with pytest.raises(ValueError, match="zero clients"):
        fed.make_clients(split.x_train, split.y_train, [], mf)
    with pytest.raises(ValueError, match="clients is empty"):
        fed.run_fedavg(mf, [], (split.x_test, split.y_test))
    clients = fed.make_clients(split.x_train, split.y_train, fed.split_clients(split.y_train, 2), mf)
    for bad in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match="fraction"):
            fed.run_fedavg(mf, clients, (split.x_test, split.y_test), rounds=1, fraction=bad)


def test_uniform_weighting_is_the_plain_mean_of_the_updates(small):
    """The control of notebook 06.5: weighting="uniform" averages the clients alike, "samples" by example count."""
    split, mf = small
    n = len(split.y_train)
    parts = [torch.arange(0, n - 20), torch.arange(n - 20, n)]  # very unequal clients
    test = (split.x_test, split.y_test)
    runs = {
        w: fed.run_fedavg(mf, fed.make_clients(split.x_train, split.y_train, parts, mf), test, rounds=1, weighting=w)
        for w in fed.WEIGHTINGS
    }
    torch.manual_seed(0)
    start = mf().state_dict()
    updates = [
        fed.make_clients(split.x_train, split.y_train, [p], mf)[0].local_update(
            start, epochs=1, lr=0.1, batch_size=16, seed=seeds.derive(0, "round", 0, cid)
        )[0]
        for cid, p in enumerate(parts)
    ]
    for w, counts in (("samples", [n - 20, 20]), ("uniform", [1, 1])):
        expected = fed.fedavg(updates, counts)
        for k, v in runs[w].server.state.items():
            assert torch.allclose(v, expected[k], atol=1e-6), (w, k)
    assert not torch.allclose(runs["samples"].server.state["0.weight"], runs["uniform"].server.state["0.weight"])


def test_stop_at_ends_the_run_at_the_first_round_that_reaches_it(small):
    split, mf = small
    clients = fed.make_clients(split.x_train, split.y_train, fed.split_clients(split.y_train, 2), mf)
    test = (split.x_test, split.y_test)
    full = fed.run_fedavg(mf, clients, test, rounds=6, lr=0.5)
    target = full.acc[2]
    stopped = fed.run_fedavg(mf, clients, test, rounds=6, lr=0.5, stop_at=target)
    assert len(stopped.acc) == full.rounds_to(target) and stopped.acc == full.acc[: len(stopped.acc)]
    for bad in (dict(weighting="median"), dict(stop_at=0), dict(stop_at=1.5)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            fed.run_fedavg(mf, clients, test, rounds=1, **bad)
    with pytest.raises(ValueError, match="weighting"):
        fed.Server(mf(), 2, weighting="equal")


@pytest.mark.slow
def test_allreduce_round_equals_the_simulated_round(small):
    """One FedAvg round as 2 real processes (a weighted all-reduce) gives the simulated round's model."""
    from course_lib import comm

    split, _ = small
    mf = lambda: models.MLP(64, [16], 10)  # noqa: E731
    parts = fed.split_clients(split.y_train, 2, "shards")
    clients = fed.make_clients(split.x_train, split.y_train, parts, mf)
    torch.manual_seed(0)
    state = mf().state_dict()
    sim = fed.run_fedavg(mf, clients, (split.x_test, split.y_test), rounds=1, seed=0)
    real = comm.launch(fed.fedavg_allreduce_round, 2, state, split.x_train, split.y_train, parts, threads_per_rank=1)
    for k, v in sim.server.state.items():
        assert torch.allclose(real[0][k], v, atol=1e-6) and torch.allclose(real[1][k], v, atol=1e-6), k


# --- the cost model and its table ---------------------------------------------------------------------


def test_price_table_is_cited_and_names_catalog_chips():
    rows = cost.price_table()  # notebook 06.5's rows of tables/prices.json, in the order it prints them
    raw = {
        r["key"]: r
        for r in json.loads(resources.files("course_lib").joinpath("tables", "prices.json").read_text("utf-8"))["rows"]
    }
    assert list(rows) == list(cost.COST_MODEL_KEYS) and len(rows) >= 5
    for p in rows.values():
        assert p.source.startswith("https://") and len(p.source_date) == 7 and p.notes
        assert p.value == raw[p.key]["value"]
        if p.kind == "cloud-on-demand":
            assert catalog.get_accelerator(p.accelerator).key == p.accelerator
    assert cost.job_cost is cost.job_cost and cost.Price is catalog.Price


def test_job_cost_arithmetic():
    acc = catalog.get_accelerator("a100-40gb")
    flops = 8 * acc.peak_flops("bf16") * 3600  # one hour of 8 chips at peak
    c = cost.job_cost(flops, "a100-40gb", chips=8, utilization=1.0, scaling_efficiency=1.0)
    assert c["hours"] == pytest.approx(1.0) and c["chip_hours"] == pytest.approx(8.0)
    assert c["usd"] == pytest.approx(8 * cost.price_table()["gcp-a100-40gb"].value)
    assert c["kwh"] == pytest.approx(8 * acc.power_w * cost.price_table()["pue-google"].value / 1000)
    assert cost.job_cost(flops, "tpu-v5e")["kwh"] is None  # Google publishes no TDP for v5e
    with pytest.raises(ValueError, match="no price"):
        cost.job_cost(flops, "l40s")  # not rented on Google Cloud
    with pytest.raises(ValueError, match="utilization"):
        cost.job_cost(flops, "a100", utilization=0)
