"""Data sets that ship with the course or are generated: nothing is downloaded.

* ``load_digits``: scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes),
  the small real data set most notebooks train on.
* ``make_blobs`` / ``make_regression``: synthetic tabular sets of any size.
* ``make_token_task``: a synthetic sequence classification task for the small transformer.

Every function is seeded, so the same call returns the same tensors on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import DataLoader, TensorDataset

from . import arguments, seeds


@dataclass(frozen=True)
class Split:
    """Train and test tensors of one data set."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    n_classes: int

    @property
    def train(self) -> TensorDataset:
        return TensorDataset(self.x_train, self.y_train)

    @property
    def test(self) -> TensorDataset:
        return TensorDataset(self.x_test, self.y_test)

    def loaders(self, batch_size: int = 64, shuffle: bool = True, seed: int = 0) -> tuple[DataLoader, DataLoader]:
        """(train_loader, test_loader); the train loader shuffles with a seeded generator."""
        _positive_int("batch_size", batch_size)
        g = torch.Generator().manual_seed(seed)
        return (
            DataLoader(self.train, batch_size=batch_size, shuffle=shuffle, generator=g),
            DataLoader(self.test, batch_size=batch_size),
        )


_positive_int = arguments.positive_int
_fraction = arguments.fraction


def _split(x: torch.Tensor, y: torch.Tensor, test_fraction: float, seed: int, n_classes: int) -> Split:
    arguments.nonnegative_int("seed", seed)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(x), generator=g)
    n_test = max(1, int(round(len(x) * _fraction("test_fraction", test_fraction))))
    test, train = order[:n_test], order[n_test:]
    return Split(x[train], y[train], x[test], y[test], n_classes)


def load_digits(test_fraction: float = 0.25, flat: bool = True, seed: int = 0, fraction: float = 1.0) -> Split:
    """scikit-learn's bundled digits, pixels scaled to [0, 1].

    ``flat=True`` gives 64 features per image (for an MLP), ``flat=False`` gives 1x8x8 images
    (for a CNN). ``fraction`` keeps a seeded random subset of the whole set (e.g. 0.1).
    """
    from sklearn.datasets import load_digits as _sk_digits

    arguments.boolean("flat", flat)
    fraction = arguments.fraction("fraction", fraction, allow_one=True)
    raw = _sk_digits()
    x = torch.tensor(raw.data, dtype=torch.float32) / 16.0
    y = torch.tensor(raw.target, dtype=torch.long)
    if fraction != 1.0:
        keep = torch.randperm(len(x), generator=torch.Generator().manual_seed(seeds.derive(seed, "subset")))
        n = max(20, int(len(x) * fraction))
        x, y = x[keep[:n]], y[keep[:n]]
    if not flat:
        x = x.reshape(-1, 1, 8, 8)
    return _split(x, y, test_fraction, seed, n_classes=10)


def make_blobs(
    n_samples: int = 2000,
    n_features: int = 32,
    n_classes: int = 4,
    spread: float = 1.0,
    test_fraction: float = 0.25,
    seed: int = 0,
) -> Split:
    """Gaussian clusters, one per class, for classification at any size."""
    for name, v in (("n_samples", n_samples), ("n_features", n_features), ("n_classes", n_classes)):
        _positive_int(name, v)
    arguments.integer("n_classes", n_classes, minimum=2)
    spread = arguments.positive("spread", spread)
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(n_classes, n_features, generator=g) * 3
    y = torch.randint(0, n_classes, (n_samples,), generator=g)
    x = centres[y] + spread * torch.randn(n_samples, n_features, generator=g)
    return _split(x, y, test_fraction, seed, n_classes)


def make_regression(
    n_samples: int = 2000, n_features: int = 16, noise: float = 0.1, test_fraction: float = 0.25, seed: int = 0
) -> Split:
    """y = x @ w + noise with a hidden random w (n_classes is 0: a regression target)."""
    _positive_int("n_samples", n_samples)
    _positive_int("n_features", n_features)
    noise = arguments.nonnegative("noise", noise)
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(n_features, 1, generator=g)
    x = torch.randn(n_samples, n_features, generator=g)
    y = x @ w + noise * torch.randn(n_samples, 1, generator=g)
    return _split(x, y, test_fraction, seed, n_classes=0)


def make_token_task(
    n_samples: int = 2000, seq_len: int = 16, vocab_size: int = 32, test_fraction: float = 0.25, seed: int = 0
) -> Split:
    """Random token sequences labelled by whether token 1 occurs more often than token 2.

    A task that needs the whole sequence (counting), so attention has something to do.
    """
    for name, v in (("n_samples", n_samples), ("seq_len", seq_len), ("vocab_size", vocab_size)):
        _positive_int(name, v)
    arguments.integer("vocab_size", vocab_size, minimum=3)
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, vocab_size, (n_samples, seq_len), generator=g)
    y = ((x == 1).sum(1) > (x == 2).sum(1)).long()
    return _split(x, y, test_fraction, seed, n_classes=2)


class CostlyTransformDataset(torch.utils.data.Dataset):
    """Images whose every access runs a real, CPU-heavy transform (notebook 03: input pipelines).

    A stand-in for decoding a JPEG and augmenting it: each ``__getitem__`` blurs a
    ``size x size`` image ``passes`` times with a 5x5 convolution, single-threaded, so one item
    costs a fixed amount of CPU time. Returns (image of shape 1 x size x size, label).
    Importable, so DataLoader workers started with spawn (macOS, Windows) can use it too.
    """

    def __init__(self, n: int = 512, size: int = 32, passes: int = 20, n_classes: int = 10, seed: int = 0) -> None:
        for name, v in (("n", n), ("size", size), ("passes", passes), ("n_classes", n_classes)):
            _positive_int(name, v)
        g = torch.Generator().manual_seed(seed)
        self.images = torch.rand(n, 1, size, size, generator=g)
        self.labels = torch.randint(0, n_classes, (n,), generator=g)
        self.kernel = torch.full((1, 1, 5, 5), 1 / 25)
        self.passes = passes

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        img = self.images[i : i + 1]
        for _ in range(self.passes):
            img = torch.nn.functional.conv2d(img, self.kernel, padding=2)
        return img[0], self.labels[i]
