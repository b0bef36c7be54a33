"""Federated learning by hand (FedAvg), and what the heavyweight options cost (notebook 06.5).

Federated learning trains one model on data that stays where it was made: phones, hospitals, shops.
Each round the server sends the current model down to a sample of clients, each client trains it on
its own data for a few local epochs, and sends only the new weights back up; the server averages them,
weighted by how many examples each client holds (**FedAvg**, McMahan et al., *Communication-Efficient
Learning of Deep Networks from Decentralized Data*, AISTATS 2017, arXiv:1602.05629).

The parts, in the order notebook 06.5 uses them:

* ``fedavg(states, weights)``: the weighted mean of client state dicts (section 1; also the reference
  of exercise 06).
* ``split_clients(labels, num_clients, how=...)``: IID, label-shard (non-IID) and Dirichlet splits of a
  data set into client index lists (section 2).
* ``Client``, ``Server``, ``Wire`` and ``run_fedavg``: the simulation. A ``Client`` holds its own slice
  of the data; the ``Server`` holds the global model and nothing else; every model that crosses goes
  through the ``Wire``, which serialises it to bytes and back (so the two sides never share a tensor)
  and counts the bytes up and down (sections 1-3). ``reachable_tensors`` lists every tensor an object
  can reach, so a notebook can check that the server cannot reach any client's data.
* ``train_centralised``: the same model trained the usual way on the union of the data, with the
  course's shared ``train.train_step`` (the clients use it too).
* ``fedavg_allreduce_round``: one FedAvg round run for real as processes (``comm.launch``),
  each rank a client and a weighted all-reduce as the averaging (section 3).

What the heavyweight options cost (section 4: chip-hours x price, kWh x electricity price) is
``course_lib.cost`` (``price_table``, ``job_cost``).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .. import arguments, seeds, train

SPLITS = ("iid", "shards", "dirichlet")
#: How ``Server.aggregate`` weights the clients: by example count (FedAvg) or all alike (a plain mean, the
#: control notebook 06.5 measures FedAvg's weighting against).
WEIGHTINGS = ("samples", "uniform")


# --------------------------------------------------------------------------------------
# 1. FedAvg: the weighted mean of client models
# --------------------------------------------------------------------------------------


def _weights(weights: Sequence[float], n: int) -> list[float]:
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise TypeError(f"weights must be a sequence of numbers (client sample counts), got {type(weights).__name__}")
    if len(weights) != n:
        raise ValueError(f"weights must have one entry per state dict: {n} states, {len(weights)} weights")
    out = [arguments.nonnegative(f"weights[{i}]", w) for i, w in enumerate(weights)]
    if not all(math.isfinite(w) for w in out):
        raise ValueError(f"weights must be finite numbers, got {list(weights)}")
    if sum(out) == 0:
        raise ValueError("weights are all zero: at least one client must hold examples (weights = sample counts)")
    return out


def fedavg(states: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float]) -> dict[str, torch.Tensor]:
    """The FedAvg update: ``sum_k w_k * state_k / sum_k w_k`` for every entry of the state dicts.

    Notebook 06.5, section 1. ``weights`` are the clients' sample counts (any non-negative numbers;
    normalised here). Floating-point entries are averaged in float64 and returned in their own dtype;
    integer entries (e.g. BatchNorm's ``num_batches_tracked``) are averaged and rounded. The result holds
    new tensors (no input is modified or aliased).

    Raises ValueError for no states, a weights list of another length, negative, non-finite or all-zero
    weights, and state dicts whose keys, shapes or dtypes differ (naming the first mismatch); TypeError for
    a state that is not a mapping of tensors.
    """
    if isinstance(states, Mapping) or not isinstance(states, Sequence):
        raise TypeError(f"states must be a sequence of state dicts, got {type(states).__name__}")
    if len(states) == 0:
        raise ValueError("states is empty: FedAvg needs at least one client's state dict")
    w = _weights(weights, len(states))
    for i, s in enumerate(states):
        if not isinstance(s, Mapping):
            raise TypeError(f"states[{i}] must be a state dict (a mapping of name -> tensor), got {type(s).__name__}")
        for k, v in s.items():
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"states[{i}][{k!r}] must be a tensor, got {type(v).__name__}")
    ref = states[0]
    for i, s in enumerate(states[1:], start=1):
        if set(s) != set(ref):
            missing, extra = sorted(set(ref) - set(s)), sorted(set(s) - set(ref))
            raise ValueError(f"states[{i}] has other keys than states[0]: missing {missing}, extra {extra}")
        for k in ref:
            if s[k].shape != ref[k].shape or s[k].dtype != ref[k].dtype:
                raise ValueError(
                    f"states[{i}][{k!r}] is {tuple(s[k].shape)} {s[k].dtype}, states[0][{k!r}] is "
                    f"{tuple(ref[k].shape)} {ref[k].dtype}: every client must send the same model"
                )
    total = sum(w)
    out: dict[str, torch.Tensor] = {}
    for k, r in ref.items():
        acc = torch.zeros(r.shape, dtype=torch.float64)  # on the CPU: Apple's GPU (MPS) has no float64
        for s, wi in zip(states, w):
            if wi:
                acc += s[k].detach().cpu().to(torch.float64) * (wi / total)
        acc = acc if r.dtype.is_floating_point or r.dtype.is_complex else acc.round()
        out[k] = acc.to(device=r.device, dtype=r.dtype)
    return out


# --------------------------------------------------------------------------------------
# 2. Splitting a data set into clients
# --------------------------------------------------------------------------------------


def _labels(labels: Any) -> torch.Tensor:
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"labels must be a 1-D tensor of class indices, got {type(labels).__name__}")
    if labels.dim() != 1 or labels.dtype.is_floating_point:
        raise ValueError(f"labels must be a 1-D integer tensor, got shape {tuple(labels.shape)} {labels.dtype}")
    return labels


def split_clients(
    labels: torch.Tensor,
    num_clients: int,
    how: str = "iid",
    *,
    shards_per_client: int = 2,
    alpha: float = 0.5,
    seed: int = 0,
) -> list[torch.Tensor]:
    """Split example indices among ``num_clients`` clients; returns one index tensor per client.

    Notebook 06.5, section 2.

    * ``"iid"``: a seeded shuffle cut into equal parts: every client sees every class, in the data's mix.
    * ``"shards"``: McMahan et al.'s non-IID split: sort by label, cut into ``num_clients *
      shards_per_client`` shards, deal each client ``shards_per_client`` random shards. When the shard count
      is a multiple of the number of classes each class is cut into equal pieces, so every shard holds one
      class and with 2 shards a client holds one or two classes; otherwise the sorted list is cut evenly.
    * ``"dirichlet"``: for each class, its examples are divided among the clients in proportions drawn from
      Dirichlet(``alpha``): small ``alpha`` (0.1) gives each client a few dominant classes, large (100)
      approaches IID. Every client gets at least one example.

    Raises ValueError for ``num_clients < 1`` (zero clients), more clients or shards than examples, an
    unknown ``how`` or ``alpha <= 0``.
    """
    y = _labels(labels)
    n = len(y)
    k = arguments.integer("num_clients", num_clients, minimum=1)
    how = arguments.choice("how", how, SPLITS)
    arguments.nonnegative_int("seed", seed)
    if k > n:
        raise ValueError(f"num_clients={k} is more than the {n} examples: every client needs at least one")
    g = torch.Generator().manual_seed(seed)
    if how == "iid":
        return [part.sort().values for part in torch.randperm(n, generator=g).tensor_split(k)]
    if how == "shards":
        s = arguments.integer("shards_per_client", shards_per_client, minimum=1)
        if k * s > n:
            raise ValueError(
                f"num_clients * shards_per_client = {k} * {s} = {k * s} shards is more than the {n} "
                "examples: each shard needs at least one example"
            )
        order = torch.argsort(y * n + torch.randperm(n, generator=g), stable=True)  # by label, shuffled within
        classes = torch.unique(y)
        if (k * s) % len(classes) == 0:  # class-pure shards: each class cut into the same number of pieces
            per = k * s // len(classes)
            shards = [piece for c in classes for piece in order[y[order] == c].tensor_split(per)]
        else:
            shards = list(order.tensor_split(k * s))
        deal = torch.randperm(k * s, generator=g).reshape(k, s)
        return [torch.cat([shards[j] for j in row.tolist()]).sort().values for row in deal]
    a = arguments.positive("alpha", alpha)
    parts: list[list[torch.Tensor]] = [[] for _ in range(k)]
    dist = torch.distributions.Dirichlet(torch.full((k,), float(a)))
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        for c in torch.unique(y).tolist():
            idx = torch.nonzero(y == c).flatten()
            idx = idx[torch.randperm(len(idx), generator=g)]
            cuts = (dist.sample().cumsum(0) * len(idx)).round().long()[:-1].tolist()
            for i, piece in enumerate(torch.tensor_split(idx, cuts)):
                parts[i].append(piece)
    finally:
        torch.random.set_rng_state(state)
    out = [torch.cat(p) for p in parts]
    for i in range(k):  # a client left empty takes one example from the largest client
        if len(out[i]) == 0:
            j = max(range(k), key=lambda m: len(out[m]))
            out[i], out[j] = out[j][-1:], out[j][:-1]
    return [o.sort().values for o in out]


def classes_per_client(labels: torch.Tensor, parts: Sequence[torch.Tensor]) -> list[int]:
    """How many distinct classes each client holds (notebook 06.5, section 2: how non-IID a split is)."""
    y = _labels(labels)
    return [int(torch.unique(y[p]).numel()) for p in parts]


# --------------------------------------------------------------------------------------
# 3. The simulation: clients, a server, and the wire between them
# --------------------------------------------------------------------------------------


def state_bytes(state: Mapping[str, torch.Tensor]) -> int:
    """Payload bytes of a state dict: the sum of its tensors' ``nbytes`` (what FedAvg sends each way)."""
    arguments.instance("state", state, Mapping, "a state dict (name -> tensor)")
    return sum(int(t.numel() * t.element_size()) for t in state.values())


@dataclass
class Wire:
    """The network between server and clients.

    Every message is serialised with ``torch.save`` and read back with ``torch.load(weights_only=True)``,
    so the receiver gets its own copy, never a reference to the sender's tensors. It counts the
    messages and both the payload bytes (tensor data) and the serialised bytes (with the file format's
    names and headers), each way.
    """

    bytes_down: int = 0  # payload, server -> clients
    bytes_up: int = 0  # payload, clients -> server
    wire_bytes: int = 0  # serialised, both ways
    messages: int = 0

    def send(self, state: Mapping[str, torch.Tensor], direction: str) -> dict[str, torch.Tensor]:
        """Carry ``state`` across in ``direction`` ("down" or "up"); returns the receiver's copy."""
        direction = arguments.choice("direction", direction, ("down", "up"))
        buf = io.BytesIO()
        torch.save({k: v.detach() for k, v in state.items()}, buf)
        payload = state_bytes(state)
        if direction == "down":
            self.bytes_down += payload
        else:
            self.bytes_up += payload
        self.wire_bytes += buf.tell()
        self.messages += 1
        buf.seek(0)
        return torch.load(buf, weights_only=True)

    @property
    def total(self) -> int:
        """Payload bytes both ways."""
        return self.bytes_down + self.bytes_up


class Client:
    """One client: its own slice of the data and a local copy of the model.

    The data lives in private attributes and never leaves: ``local_update`` receives a state dict,
    trains a local model on the client's data with the course's ``train.train_step`` (plain SGD, no
    optimizer state carried between rounds, as in FedAvg) and returns only the new state dict.
    """

    def __init__(self, client_id: int, x: torch.Tensor, y: torch.Tensor, model_fn: Callable[[], nn.Module]) -> None:
        if len(x) != len(y) or len(x) == 0:
            raise ValueError(
                f"client {client_id}: x and y must hold the same number (>= 1) of examples, got {len(x)} and {len(y)}"
            )
        self.client_id = client_id
        self._x, self._y = x, y
        self._model = model_fn()

    @property
    def num_samples(self) -> int:
        """How many examples this client holds (its FedAvg weight; the only fact about its data it reports)."""
        return len(self._y)

    def data_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The client's data (for checks on this machine only: a real client never hands it out)."""
        return self._x, self._y

    def local_update(
        self, state: Mapping[str, torch.Tensor], *, epochs: int, lr: float, batch_size: int, seed: int
    ) -> tuple[dict[str, torch.Tensor], int]:
        """Train the received model for ``epochs`` passes over the local data; return (new state, examples seen)."""
        self._model.load_state_dict(state)
        self._model.train()
        opt = train.make_optimizer("sgd", self._model.parameters(), lr)
        g = torch.Generator().manual_seed(seed)
        seen = 0
        for _ in range(epochs):
            for idx in torch.randperm(len(self._y), generator=g).split(batch_size):
                train.train_step(self._model, (self._x[idx], self._y[idx]), opt)
                seen += len(idx)
        return {k: v.detach().clone() for k, v in self._model.state_dict().items()}, seen


class Server:
    """The server: the global model's state and the round's bookkeeping, no client data.

    ``select`` samples the round's clients by id; ``aggregate`` applies ``fedavg`` to the updates that came
    up the wire, weighted by the sample counts the clients reported (``weighting="samples"``, FedAvg) or,
    with ``weighting="uniform"``, all alike: the plain mean FedAvg is measured against.
    """

    def __init__(
        self, model: nn.Module, num_clients: int, fraction: float = 1.0, seed: int = 0, weighting: str = "samples"
    ) -> None:
        self.num_clients = arguments.integer("num_clients", num_clients, minimum=1)
        self.fraction = arguments.fraction("fraction", fraction, allow_one=True)
        self.weighting = arguments.choice("weighting", weighting, WEIGHTINGS)
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self._rng = torch.Generator().manual_seed(seed)

    @property
    def per_round(self) -> int:
        """Clients per round: ``max(1, round(fraction * num_clients))``."""
        return max(1, round(self.fraction * self.num_clients))

    def select(self) -> list[int]:
        """The ids of this round's clients, sampled without replacement."""
        return sorted(torch.randperm(self.num_clients, generator=self._rng)[: self.per_round].tolist())

    def aggregate(self, updates: Sequence[dict[str, torch.Tensor]], counts: Sequence[int]) -> float:
        """Replace the global state with the FedAvg of ``updates``; return the round's client drift.

        Drift is ``1 - |sum p_k d_k| / sum p_k |d_k|`` over the clients' updates ``d_k = w_k - w``
        (p_k their weights): 0 when every client moved the model the same way, towards 1 when their
        moves cancel out (why non-IID data needs more rounds). With
        ``weighting="uniform"`` every client counts alike, whatever its ``counts``.
        """
        if self.weighting == "uniform":
            counts = [1] * len(updates)
        deltas = [torch.cat([(u[k] - self.state[k]).flatten().cpu().double() for k in self.state]) for u in updates]
        p = torch.tensor([float(c) for c in counts], dtype=torch.float64)
        p = p / p.sum()
        mean = sum(pi * d for pi, d in zip(p, deltas))
        spread = float(sum(pi * d.norm() for pi, d in zip(p, deltas)))
        self.state = fedavg(updates, counts)
        return 0.0 if spread == 0 else 1.0 - float(mean.norm()) / spread


def reachable_tensors(obj: Any, limit: int = 100_000) -> list[torch.Tensor]:
    """Every tensor reachable from ``obj`` through attributes, dicts, lists, tuples and sets.

    Notebook 06.5, section 1: "the data never leaves a client", checked: none of the tensors the server
    can reach shares memory with a client's data (``shares_memory``).
    """
    seen: set[int] = set()
    found: list[torch.Tensor] = []
    stack = [obj]
    while stack and len(seen) < limit:
        o = stack.pop()
        if id(o) in seen or isinstance(o, (str, bytes, int, float, bool, type(None), torch.Generator)):
            continue
        seen.add(id(o))
        if isinstance(o, torch.Tensor):
            found.append(o)
        elif isinstance(o, Mapping):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        elif hasattr(o, "__dict__") and not isinstance(o, type) and not callable(o):
            stack.extend(vars(o).values())
    return found


def shares_memory(tensors: Sequence[torch.Tensor], others: Sequence[torch.Tensor]) -> bool:
    """True if any tensor of ``tensors`` uses the same storage as any of ``others``."""
    ptrs = {t.untyped_storage().data_ptr() for t in others if t.numel()}
    return any(t.numel() and t.untyped_storage().data_ptr() in ptrs for t in tensors)


@dataclass
class FedResult:
    """One FedAvg run: per-round accuracy, drift and bytes."""

    acc: list[float] = field(default_factory=list)  # held-out accuracy after each round
    drift: list[float] = field(default_factory=list)
    bytes_total: list[int] = field(default_factory=list)  # payload bytes both ways, cumulative
    examples: list[int] = field(default_factory=list)  # client training examples processed, cumulative
    clients_per_round: int = 0
    model_bytes: int = 0
    wire: Wire = field(default_factory=Wire)
    server: Server | None = None  # the server at the end (notebook 06.5 checks what it can reach)

    def rounds_to(self, target: float) -> int | None:
        """The first round (1-based) whose accuracy reached ``target``; None if none did."""
        return next((r + 1 for r, a in enumerate(self.acc) if a >= target), None)

    @property
    def best(self) -> float:
        return max(self.acc) if self.acc else 0.0


def make_clients(
    x: torch.Tensor, y: torch.Tensor, parts: Sequence[torch.Tensor], model_fn: Callable[[], nn.Module]
) -> list[Client]:
    """One ``Client`` per index tensor, each holding its own copy of its slice (notebook 06.5)."""
    if len(parts) == 0:
        raise ValueError("parts is empty: zero clients; pass at least one index tensor (split_clients)")
    return [Client(i, x[p].clone(), y[p].clone(), model_fn) for i, p in enumerate(parts)]


def run_fedavg(
    model_fn: Callable[[], nn.Module],
    clients: Sequence[Client],
    test: tuple[torch.Tensor, torch.Tensor],
    *,
    rounds: int = 50,
    fraction: float = 1.0,
    local_epochs: int = 1,
    lr: float = 0.1,
    batch_size: int = 16,
    seed: int = 0,
    weighting: str = "samples",
    stop_at: float | None = None,
) -> FedResult:
    """Simulate FedAvg for ``rounds`` rounds and evaluate the global model after each (notebook 06.5).

    Per round: the server samples ``fraction`` of the clients; the global state goes down the ``Wire`` to
    each, each trains ``local_epochs`` epochs on its own data (``Client.local_update``) and sends its state
    back up the wire; the server averages them weighted by sample counts (``fedavg``). The clients are
    visited one after another in this process; ``fedavg_allreduce_round`` runs a round as real processes.
    ``weighting="uniform"`` averages the clients alike instead (the control for FedAvg's weighting);
    ``stop_at`` (an accuracy) ends the run after the first round that reaches it.

    Raises ValueError for zero clients, ``fraction`` outside (0, 1], non-positive counts, an unknown
    ``weighting`` and a ``stop_at`` outside (0, 1].
    """
    if len(clients) == 0:
        raise ValueError("clients is empty: FedAvg needs at least one client")
    rounds = arguments.positive_int("rounds", rounds)
    local_epochs = arguments.positive_int("local_epochs", local_epochs)
    batch_size = arguments.positive_int("batch_size", batch_size)
    lr = arguments.positive("lr", lr)
    arguments.choice("weighting", weighting, WEIGHTINGS)
    if stop_at is not None:
        stop_at = arguments.fraction("stop_at", stop_at, allow_one=True)
    torch.manual_seed(seed)
    server = Server(model_fn(), len(clients), fraction, seeds.derive(seed, "select"), weighting)
    evaluator = model_fn()
    result = FedResult(clients_per_round=server.per_round, model_bytes=state_bytes(server.state))
    examples = 0
    for r in range(rounds):
        updates, counts = [], []
        for cid in server.select():
            received = result.wire.send(server.state, "down")
            new_state, seen = clients[cid].local_update(
                received, epochs=local_epochs, lr=lr, batch_size=batch_size, seed=seeds.derive(seed, "round", r, cid)
            )
            updates.append(result.wire.send(new_state, "up"))
            counts.append(clients[cid].num_samples)
            examples += seen
        result.drift.append(server.aggregate(updates, counts))
        evaluator.load_state_dict(server.state)
        result.acc.append(_accuracy(evaluator, test))
        result.bytes_total.append(result.wire.total)
        result.examples.append(examples)
        if stop_at is not None and result.acc[-1] >= stop_at:
            break
    result.server = server
    return result


def _accuracy(model: nn.Module, test: tuple[torch.Tensor, torch.Tensor]) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(test[0]).argmax(1) == test[1]).float().mean())


def train_centralised(
    model_fn: Callable[[], nn.Module],
    x: torch.Tensor,
    y: torch.Tensor,
    test: tuple[torch.Tensor, torch.Tensor],
    *,
    epochs: int = 30,
    lr: float = 0.1,
    batch_size: int = 16,
    seed: int = 0,
) -> FedResult:
    """The same model trained on all the data in one place, one epoch = one "round" (notebook 06.5).

    Runs through a single ``Client`` holding everything, so the step, optimizer and batching are exactly
    those of the federated clients; its wire is never used (the bytes of centralised training are the
    data set's, sent once: ``data_bytes``). Epoch ``e`` shuffles with the stream of round ``e``'s client 0,
    so FedAvg of one client holding everything is this run, number for number.
    """
    torch.manual_seed(seed)
    model = model_fn()
    everyone = Client(0, x, y, model_fn)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    result = FedResult(clients_per_round=1, model_bytes=state_bytes(state))
    for e in range(arguments.positive_int("epochs", epochs)):
        state, seen = everyone.local_update(
            state, epochs=1, lr=lr, batch_size=batch_size, seed=seeds.derive(seed, "round", e, 0)
        )
        model.load_state_dict(state)
        result.acc.append(_accuracy(model, test))
        result.examples.append((result.examples[-1] if result.examples else 0) + seen)
    return result


def data_bytes(*tensors: torch.Tensor) -> int:
    """Bytes to send these tensors to a central server once (notebook 06.5: bytes vs centralised)."""
    return sum(int(t.numel() * t.element_size()) for t in tensors)


# --------------------------------------------------------------------------------------
# 3b. One round as real processes: a weighted all-reduce is FedAvg
# --------------------------------------------------------------------------------------


def fedavg_allreduce_round(
    state: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    parts: Sequence[torch.Tensor],
    *,
    epochs: int = 1,
    lr: float = 0.1,
    batch_size: int = 16,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """Worker for ``comm.launch``: rank r is client r; returns the averaged state (notebook 06.5).

    Each rank trains its own slice ``parts[rank]`` from ``state``, multiplies its weights by its sample
    count, and one ``all_reduce(SUM)`` of those products and of the counts gives every rank
    ``sum n_k w_k / sum n_k``: FedAvg without a server. ``run_fedavg`` with the same seeds gives the same
    numbers (client ``rank`` uses seed ``seeds.derive(seed, "round", 0, rank)``, as in round 0 of the simulation).
    """
    import torch.distributed as dist

    rank = dist.get_rank()
    model_fn = _ModelFromState(state)
    client = Client(rank, x[parts[rank]], y[parts[rank]], model_fn)
    new_state, _ = client.local_update(
        state, epochs=epochs, lr=lr, batch_size=batch_size, seed=seeds.derive(seed, "round", 0, rank)
    )
    n = torch.tensor([float(client.num_samples)], dtype=torch.float64)
    flat = torch.cat([v.double().flatten() for v in new_state.values()]) * n
    dist.all_reduce(flat)
    dist.all_reduce(n)
    flat /= n
    out, i = {}, 0
    for k, v in new_state.items():
        out[k] = flat[i : i + v.numel()].reshape(v.shape).to(v.dtype)
        i += v.numel()
    return out


class _ModelFromState:
    """Rebuilds the course MLP whose shapes a state dict of Linear layers describes (picklable)."""

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        self.widths = [state[k].shape[1] for k in state if k.endswith("weight")] + [
            state[[k for k in state if k.endswith("weight")][-1]].shape[0]
        ]

    def __call__(self) -> nn.Module:
        from ..models import MLP

        return MLP(self.widths[0], self.widths[1:-1], self.widths[-1])


# --------------------------------------------------------------------------------------
# 4. What the heavyweight options cost: money and energy
# --------------------------------------------------------------------------------------

# The cost model (``price_table``, ``job_cost``, ``Price``) is ``course_lib.cost``, which notebook 07.3 extends.


__all__ = [
    "SPLITS",
    "WEIGHTINGS",
    "fedavg",
    "split_clients",
    "classes_per_client",
    "state_bytes",
    "Wire",
    "Client",
    "Server",
    "reachable_tensors",
    "shares_memory",
    "FedResult",
    "make_clients",
    "run_fedavg",
    "train_centralised",
    "data_bytes",
    "fedavg_allreduce_round",
]
