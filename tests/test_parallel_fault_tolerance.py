"""course_lib.parallel.fault_tolerance: checkpoints, resuming, retries, redundancy, the cost model (notebook 06.3)."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
import torch

from course_lib import comm, models, train
from course_lib.parallel import fault_tolerance as ft


def _pair(seed: int = 0):
    torch.manual_seed(seed)
    model = models.MLP(8, 16, 3, dropout=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    train.train_step(model, (torch.randn(4, 8), torch.tensor([0, 1, 2, 0])), optimizer)
    return model, optimizer


def _draws():
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def test_capture_restore_round_trip_with_rng():
    model, opt = _pair(0)
    state = ft.capture_state(model, opt, {"epoch": 1, "batch": 2})
    expected = _draws()
    train.train_step(model, (torch.randn(4, 8), torch.tensor([0, 1, 2, 0])), opt)  # moves on: the snapshot must not
    fresh, fresh_opt = _pair(1)
    assert ft.restore_state(state, fresh, fresh_opt) == {"epoch": 1, "batch": 2}
    assert _draws() == expected
    for k, v in state["model"].items():
        assert torch.equal(fresh.state_dict()[k], v)
    assert not torch.equal(model.state_dict()["0.weight"], state["model"]["0.weight"]), "capture must copy"
    assert fresh_opt.state_dict()["state"][0]["step"] == state["optimizer"]["state"][0]["step"]


def test_save_is_weights_only_loadable_and_leaves_no_temp_files(tmp_path):
    model, opt = _pair()
    path = ft.save_checkpoint(tmp_path / "a.pt", ft.capture_state(model, opt, {"step": 3}))
    raw = torch.load(path, weights_only=True)  # the plain loader, no allow-listing
    assert raw["format"] == "course_lib.checkpoint/1" and raw["state"]["position"] == {"step": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["a.pt"]
    assert ft.load_checkpoint(path)["position"] == {"step": 3}


def test_failed_save_keeps_the_old_file_and_removes_its_temp(tmp_path):
    path = ft.save_checkpoint(tmp_path / "a.pt", {"w": torch.ones(3)})
    with pytest.raises(Exception):
        ft.save_checkpoint(path, {"w": torch.ones(3), "bad": lambda: 0})  # cannot be pickled
    assert [p.name for p in tmp_path.iterdir()] == ["a.pt"]
    assert torch.equal(ft.load_checkpoint(path)["w"], torch.ones(3))


def test_corrupt_truncated_and_foreign_files_name_the_file(tmp_path):
    good = ft.save_checkpoint(tmp_path / "good.pt", {"w": torch.arange(1000.0)})
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(good.read_bytes()[:300])
    flipped = tmp_path / "flipped.pt"
    raw = bytearray(good.read_bytes())
    raw[len(raw) // 2] ^= 1
    flipped.write_bytes(raw)
    foreign = tmp_path / "foreign.pt"
    torch.save({"w": torch.ones(2)}, foreign)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    for bad in (truncated, flipped, foreign, empty):
        with pytest.raises(ft.CheckpointError, match=bad.name) as info:
            ft.load_checkpoint(bad)
        assert info.value.path == str(bad) and isinstance(info.value, ValueError)
    with pytest.raises(FileNotFoundError, match="nothere"):
        ft.load_checkpoint(tmp_path / "nothere.pt")


def test_load_latest_falls_back_keeps_n_and_reports(tmp_path):
    for step in range(1, 6):
        ft.save_checkpoint(ft.checkpoint_path(tmp_path, step), {"position": {"step": step}}, keep=3)
    assert [p.name for p in ft.list_checkpoints(tmp_path)] == [f"ckpt-0000000{s}.pt" for s in (3, 4, 5)]
    newest = ft.checkpoint_path(tmp_path, 5)
    newest.write_bytes(newest.read_bytes()[:50])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = ft.load_latest(tmp_path)
    assert state["position"]["step"] == 4 and state["loaded_from"] == str(ft.checkpoint_path(tmp_path, 4))
    assert [w.category for w in caught] == [ft.CheckpointWarning] and newest.name in str(caught[0].message)
    messages = []
    ft.load_latest(tmp_path, report=messages.append)
    assert len(messages) == 1 and "ckpt-00000005.pt" in messages[0]


def test_load_latest_empty_missing_and_bad_arguments(tmp_path):
    assert ft.load_latest(tmp_path) is None
    with pytest.raises(ValueError, match="does not exist"):
        ft.load_latest(tmp_path / "missing")
    with pytest.raises(TypeError, match="directory"):
        ft.load_latest(42)
    with pytest.raises(TypeError, match="report"):
        ft.load_latest(tmp_path, report="print")


def test_bad_input_raises_clear_errors(tmp_path):
    model, opt = _pair()
    with pytest.raises(TypeError, match="model"):
        ft.capture_state("model", opt, {})
    with pytest.raises(TypeError, match="optimizer"):
        ft.capture_state(model, None, {})
    with pytest.raises(TypeError, match="position"):
        ft.capture_state(model, opt, [1, 2])
    with pytest.raises(TypeError, match="state"):
        ft.restore_state({"model": {}}, model, opt)
    with pytest.raises(TypeError, match="path"):
        ft.save_checkpoint(3, {})
    with pytest.raises(TypeError, match="state"):
        ft.save_checkpoint(tmp_path / "a.pt", [1])
    with pytest.raises(ValueError, match="does not exist"):
        ft.save_checkpoint(tmp_path / "no" / "a.pt", {})
    with pytest.raises(ValueError, match="keep"):
        ft.save_checkpoint(tmp_path / "a.pt", {}, keep=0)
    with pytest.raises(ValueError, match="step"):
        ft.checkpoint_path(tmp_path, -1)
    with pytest.raises(TypeError, match="rng_state"):
        ft.set_rng_state({"torch": 1})


def test_shuffled_batches_resume_mid_epoch():
    x, y = torch.arange(20.0).reshape(10, 2), torch.arange(10)
    data = ft.ShuffledBatches(x, y, batch_size=3, seed=5)
    whole = [b for _, (_, b) in data.batches(2)]
    tail = [b for _, (_, b) in ft.ShuffledBatches(x, y, 3, seed=5).batches(2, start=2)]
    assert len(data) == 4 and all(torch.equal(a, b) for a, b in zip(whole[2:], tail))
    assert not torch.equal(data.order(0), data.order(1))
    with pytest.raises(ValueError):
        ft.ShuffledBatches(x, y[:5], 3)
    with pytest.raises(ValueError, match="batch_size"):
        ft.ShuffledBatches(x, y, 0)
    with pytest.raises(ValueError, match="start"):
        list(data.batches(0, start=5))


def test_training_run_resumes_on_the_same_trajectory(tmp_path):
    threads = torch.get_num_threads()
    try:
        g = torch.Generator().manual_seed(0)
        data = (torch.randn(200, 64, generator=g), torch.randint(0, 10, (200,), generator=g))
        full = ft.training_run(14, data=data, batch_size=32)
        kw = dict(steps=14, every=4, data=data, batch_size=32)
        ft.training_run(directory=tmp_path / "a", stop_after=10, **kw)
        resumed = ft.training_run(directory=tmp_path / "a", resume=True, **kw)
        assert resumed["resumed_from"] == 8
        assert all(resumed["losses"][s] == full["losses"][s] for s in range(9, 15))
        ft.training_run(directory=tmp_path / "b", stop_after=10, **kw)
        partial = ft.training_run(directory=tmp_path / "b", resume=True, partial=True, **kw)
        assert any(partial["losses"][s] != full["losses"][s] for s in range(9, 15))
        with pytest.raises(ValueError, match="directory"):
            ft.training_run(3, every=1)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.slow
def test_killed_writer_atomic_survives_direct_breaks(tmp_path):
    """Needs a second process: the kill must land while another process writes."""
    atomic = ft.killed_write_trial(tmp_path / "a.pt", 16, True, 0.5)
    direct = ft.killed_write_trial(tmp_path / "d.pt", 16, False, 0.5)
    assert atomic["loadable"] and atomic["step"] == 2, atomic
    assert 0 < direct["written"] < direct["size"], direct
    assert not direct["loadable"] and "d.pt" in direct["error"], direct
    assert not list(tmp_path.glob(".*.tmp"))


def test_retry_delays_giving_up_and_what_is_not_retried():
    calls, slept = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionRefusedError("not yet")
        return "ok"

    assert ft.retry(flaky, attempts=5, backoff=0.1, factor=3, sleep=slept.append) == "ok"
    assert slept == pytest.approx([0.1, 0.3])
    with pytest.raises(ConnectionRefusedError):
        ft.retry(lambda: (_ for _ in ()).throw(ConnectionRefusedError()), attempts=2, sleep=slept.append)
    with pytest.raises(KeyError):  # not in retry_on: raised at once
        ft.retry(lambda: {}["x"], attempts=5, retry_on=OSError, sleep=lambda s: pytest.fail("retried"))
    assert ft.retry_schedule(4, 0.05) == pytest.approx([0, 0.05, 0.15, 0.35])
    assert ft.predicted_success_time(1.0, 8, 0.05) == pytest.approx(1.55)
    assert ft.predicted_success_time(10.0, 3, 0.05) is None
    with pytest.raises(TypeError, match="retry_on"):
        ft.retry(flaky, retry_on="OSError")
    with pytest.raises(ValueError, match="attempts"):
        ft.retry(flaky, attempts=0)
    with pytest.raises(ValueError, match="factor"):
        ft.retry(flaky, factor=0.5)


@pytest.mark.slow
def test_delayed_service_refuses_then_accepts():
    with ft.DelayedService(0.3) as service:
        with pytest.raises(ConnectionRefusedError):
            ft.connect(service.port)
        at = ft.retry(lambda: ft.connect(service.port), attempts=10, backoff=0.05, retry_on=ConnectionRefusedError)
        assert at - service.started_at >= 0.3


def test_redundancy_and_cost_models(tmp_path):
    assert ft.availability(0.1, 1) == pytest.approx(0.9) and ft.availability(0.1, 3) == pytest.approx(0.999)
    copies = ft.save_replicated([tmp_path / "a.pt", tmp_path / "b.pt"], {"w": torch.ones(2)})
    copies[0].write_bytes(b"junk")
    notes = []
    assert ft.load_first_good(copies, report=notes.append)["loaded_from"] == str(copies[1]) and "a.pt" in notes[0]
    copies[1].write_bytes(b"junk")
    with pytest.raises(ft.CheckpointError, match="b.pt"):
        ft.load_first_good(copies)
    with pytest.raises(TypeError):
        ft.save_replicated(str(tmp_path / "a.pt"), {})
    with pytest.raises(ValueError):
        ft.load_first_good([])
    fixed, bandwidth = ft.write_cost_fit([1e6, 2e6, 4e6], [0.02 + x / 1e8 for x in (1e6, 2e6, 4e6)])
    assert fixed == pytest.approx(0.02) and bandwidth == pytest.approx(1e8)
    with pytest.raises(ValueError):
        ft.write_cost_fit([1e6, 1e6], [0.1, 0.2])
    best = ft.young_daly_interval(2.0, 3600.0)
    assert best == pytest.approx(math.sqrt(2 * 2.0 * 3600))
    assert all(ft.lost_fraction(best * f, 2.0, 3600) > ft.lost_fraction(best, 2.0, 3600) for f in (0.9, 1.1))
    simulated = {f: ft.simulate_lost_fraction(best * f, 2.0, 3600, failures=20_000, seed=1) for f in (0.25, 1, 4)}
    assert min(simulated, key=simulated.get) == 1  # random failures: Young's interval loses least
    assert simulated[1] == pytest.approx(ft.lost_fraction(best, 2.0, 3600), rel=0.15)
    with pytest.raises(ValueError, match="failures"):
        ft.simulate_lost_fraction(10.0, 1.0, 100.0, failures=0)
    with pytest.raises(ValueError, match="mtbf_s"):
        ft.young_daly_interval(1.0, 0)
    with pytest.raises(ValueError, match="p_fail"):
        ft.availability(1.5, 2)
    assert ft.timed_save(tmp_path / "t.pt", {"w": torch.ones(2)}) > 0


def test_restarts_follow_daly_and_daly_refines_young():
    """Daly (2006): the exact loss for random failures, restarts included, is what the simulation measures; his
    interval is a little shorter than Young's and the restart cost does not move it."""
    for write, mtbf, restart in ((2.0, 3600.0, 0.0), (2.0, 648.0, 600.0), (60.0, 3600.0, 120.0)):
        tau = ft.daly_interval(write, mtbf)
        assert tau < ft.young_daly_interval(write, mtbf)
        exact = ft.daly_lost_fraction(tau, write, mtbf, restart)
        assert ft.simulate_lost_fraction(tau, write, mtbf, failures=50_000, seed=2, restart_s=restart) == pytest.approx(
            exact, rel=0.03
        )
        assert restart == 0 or exact > ft.daly_lost_fraction(tau, write, mtbf)
        # first order, the restart adds R / MTBF whatever the interval
        assert ft.lost_fraction(tau, write, mtbf, restart) - ft.lost_fraction(tau, write, mtbf) == pytest.approx(
            restart / mtbf
        )
    assert ft.daly_interval(10.0, 4.0) == 4.0  # a write longer than twice the MTBF: checkpoint every MTBF
    with pytest.raises(ValueError, match="restart_s"):
        ft.daly_lost_fraction(10.0, 1.0, 100.0, restart_s=-1)
    with pytest.raises(ValueError, match="restart_s"):
        ft.simulate_lost_fraction(10.0, 1.0, 100.0, restart_s=-1)


def test_jittered_retries_wait_a_random_part_of_the_back_off():
    def failing():
        raise ConnectionRefusedError()

    plain, jittered, again = [], [], []
    for out, jitter, seed in ((plain, False, None), (jittered, True, 3), (again, True, 3)):
        with pytest.raises(ConnectionRefusedError):
            ft.retry(failing, attempts=6, backoff=0.1, jitter=jitter, seed=seed, sleep=out.append)
    assert plain == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6])
    assert jittered == again and all(0 <= j <= p for j, p in zip(jittered, plain)) and jittered != plain
    with pytest.raises(TypeError, match="jitter"):
        ft.retry(failing, jitter="yes")


@pytest.mark.slow
def test_many_clients_retry_in_lockstep_unless_jittered():
    storms = {j: ft.retry_storm(clients=12, down_s=0.3, backoff=0.04, jitter=j) for j in (False, True)}
    assert storms[False]["peak_share"] >= 10 / 12, storms[False]
    assert storms[True]["peak_share"] <= 0.6, storms[True]
    # measured from the moment the service went down, so no client can connect before down_s
    assert all(0.3 <= t < 5 for s in storms.values() for t in s["connected_s"]), storms
    with pytest.raises(ValueError, match="clients"):
        ft.retry_storm(clients=0)


@pytest.mark.slow
def test_a_job_fails_when_any_worker_dies_and_big_jobs_fail_more():
    jobs = ft.job_survival([1, 4], trials=6, steps=10, hazard=0.02, step_s=0.0)
    assert jobs[1]["predicted"] == pytest.approx(0.98**10) and jobs[4]["predicted"] == pytest.approx(0.98**40)
    assert jobs[4]["finished"] < jobs[1]["finished"], jobs
    assert ft.job_survival([2], trials=2, steps=3, hazard=0.0, step_s=0.0)[2]["finished"] == 2
    assert ft.job_survival([2], trials=2, steps=3, hazard=1.0, step_s=0.0)[2]["finished"] == 0
    with pytest.raises(ValueError, match="sizes"):
        ft.job_survival([])
    with pytest.raises(ValueError, match="hazard"):
        ft.job_survival([1], hazard=1.5)


def test_notebook_06_3_checkpoint_is_its_tensors_plus_a_little(tmp_path):
    """Notebook 06.3 prints this as computed: a checkpoint is its tensors' bytes plus a few % of zip structure, and
    loads back unchanged."""
    torch.manual_seed(0)
    model = models.MLP(64, 128, 10, dropout=0.2)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    train.train_step(model, (torch.randn(64, 64), torch.randint(0, 10, (64,))), opt)
    state = ft.capture_state(model, opt, {"epoch": 0, "batch": 1, "step": 1, "seed": 0})
    assert list(state["rng"]) == ["torch", "numpy", "python"]
    path = ft.save_checkpoint(tmp_path / "c.pt", state)
    predicted = models.count_parameters(model) * 12 + 5056 + 624 * 8 + 625 * 8
    assert 1.0 < path.stat().st_size / predicted < 1.1
    assert torch.equal(ft.load_checkpoint(path)["model"]["0.weight"], model[0].weight)


def test_notebook_06_3_loader_skips_a_truncated_and_a_flipped_file(tmp_path):
    for step in range(1, 6):
        ft.save_checkpoint(
            ft.checkpoint_path(tmp_path, step), {"w": torch.arange(10_000.0), "position": {"step": step}}, keep=3
        )
    p5, p4 = ft.checkpoint_path(tmp_path, 5), ft.checkpoint_path(tmp_path, 4)
    p5.write_bytes(p5.read_bytes()[: p5.stat().st_size // 2])
    raw = bytearray(p4.read_bytes())
    raw[len(raw) // 2] ^= 0x10
    p4.write_bytes(raw)
    state = ft.load_latest(tmp_path, report=lambda message: None)
    assert state["position"]["step"] == 3 and len(state["skipped"]) == 2


def test_replica_trials_follow_one_minus_p_squared(tmp_path):
    """Seeded draws: the counts follow 1 - p^k by construction (notebook 06.3 prints them as computed)."""
    alone, either = ft.replica_trials(tmp_path, 0.3, 200, seed=0)
    sd = (ft.availability(0.3, 2) * (1 - ft.availability(0.3, 2)) / 200) ** 0.5
    assert abs(either / 200 - ft.availability(0.3, 2)) < 4 * sd and either > alone
    assert abs(alone / 200 - ft.availability(0.3, 1)) < 4 * (0.7 * 0.3 / 200) ** 0.5
    with pytest.raises(ValueError, match="p_fail"):
        ft.replica_trials(tmp_path, 1.5, 10)


@pytest.mark.parametrize("write_s", [0.02, 0.144, 2.0])
def test_young_interval_loses_least_in_the_simulation(write_s):
    """Notebook 06.3's simulated failures against Young's formula, for any learner's write time."""
    best = ft.young_daly_interval(write_s, 3600.0)
    factors = (0.1, 0.2, 0.5, 1, 2, 5, 10)
    sim = [ft.simulate_lost_fraction(best * f, write_s, 3600.0, failures=100_000, seed=0) for f in factors]
    assert 0.5 <= factors[sim.index(min(sim))] <= 2
    assert sim[3] == pytest.approx(ft.lost_fraction(best, write_s, 3600.0), rel=0.15)


def test_refused_attempts_are_the_starts_before_the_service():
    assert ft.retry_schedule(8, 0.05).index(ft.predicted_success_time(1.0, 8, 0.05)) == 5


@pytest.mark.slow
def test_dcp_round_trip_and_reshard_to_one_process(tmp_path):
    ranks = comm.launch(ft.dcp_roundtrip, 2, str(tmp_path / "dcp"), timeout=120)
    assert all(r["equal"] and r["loss_saved"] == r["loss_restored"] for r in ranks)
    one = ft.load_dcp_unsharded(tmp_path / "dcp")
    assert all(torch.equal(one[k], ranks[0]["full"][k]) for k in one)
    per_rank = models.count_parameters(models.MLP(64, [256, 256], 10)) * 12 / 2
    for r in range(2):
        assert abs((tmp_path / "dcp" / f"__{r}_0.distcp").stat().st_size / per_rank - 1) < 0.15
