"""The small models the course reuses: an MLP, a CNN with BatchNorm, a transformer encoder.

All are sized by arguments so a notebook can make them tiny (fast on a 2-core CPU) or large
(to fill memory or a GPU). ``build_model(name, **kwargs)`` makes one by name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from . import arguments, names

_pos = arguments.positive_int


class MLP(nn.Sequential):
    """Linear -> ReLU -> ... -> Linear. ``hidden`` is one width or a list of widths."""

    def __init__(
        self, in_features: int = 64, hidden: int | list[int] = 128, out_features: int = 10, dropout: float = 0.0
    ) -> None:
        widths = [hidden] if isinstance(hidden, int) else list(hidden)
        _pos("in_features", in_features)
        _pos("out_features", out_features)
        for w in widths:
            _pos("hidden", w)
        arguments.number("dropout", dropout, minimum=0, maximum=1, open_high=True)
        layers: list[nn.Module] = []
        prev = in_features
        for w in widths:
            layers += [nn.Linear(prev, w), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            prev = w
        layers.append(nn.Linear(prev, out_features))
        super().__init__(*layers)


class SmallCNN(nn.Module):
    """Two conv blocks (conv 3x3 -> BatchNorm -> ReLU, then 2x2 pooling) and a linear head.

    Sized for 8x8 digits by default; works for any image at least 4x4.
    """

    def __init__(self, in_channels: int = 1, n_classes: int = 10, width: int = 16, image_size: int = 8) -> None:
        super().__init__()
        _pos("in_channels", in_channels)
        _pos("n_classes", n_classes)
        _pos("width", width)
        if _pos("image_size", image_size) < 4:
            raise ValueError(f"image_size must be >= 4, got {image_size}")
        self.features = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, padding=1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.BatchNorm2d(2 * width),
            nn.ReLU(),
            nn.MaxPool2d(2),
        )
        side = image_size // 4
        self.head = nn.Linear(2 * width * side * side, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class TinyTransformer(nn.Module):
    """Token embedding + learned positions -> ``nn.TransformerEncoder`` -> mean pool -> linear head.

    ``norm_first``: pre-norm blocks (the default here, as in GPT-2 and most recent models); False gives PyTorch's
    own default, post-norm, whose last LayerNorm reads the block's final sum (notebook 02, checkpointing)."""

    def __init__(
        self,
        vocab_size: int = 32,
        seq_len: int = 16,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        n_classes: int = 2,
        ff_mult: int = 4,
        dropout: float = 0.0,
        norm_first: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(norm_first, bool):
            raise TypeError(f"norm_first must be True or False, got {norm_first!r}")
        for name, v in (
            ("vocab_size", vocab_size),
            ("seq_len", seq_len),
            ("d_model", d_model),
            ("n_heads", n_heads),
            ("n_layers", n_layers),
            ("n_classes", n_classes),
            ("ff_mult", ff_mult),
        ):
            _pos(name, v)
        arguments.number("dropout", dropout, minimum=0, maximum=1, open_high=True)
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.randn(seq_len, d_model) / math.sqrt(d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, ff_mult * d_model, dropout=dropout, batch_first=True, norm_first=norm_first
        )
        self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens) + self.pos[: tokens.shape[1]]
        return self.head(self.encoder(h).mean(dim=1))


OPTIMIZERS = names.OPTIMIZERS
_ADAMW_DEFAULT_WEIGHT_DECAY = 0.01  # torch.optim.AdamW's own default


def make_optimizer(
    name: str,
    params: Iterable[torch.nn.Parameter],
    lr: float = 1e-3,
    weight_decay: float | None = None,
    foreach: bool | None = None,
) -> torch.optim.Optimizer:
    """'sgd', 'momentum' (SGD with momentum 0.9), 'adam' or 'adamw' (any case).

    Used by the training step (``course_lib.train``) and the memory estimator (notebook 02), so
    both build exactly the same optimizer. ``weight_decay`` defaults to 0, except AdamW's 0.01 (its
    own default); an explicit value, 0.0 included, is always used. ``foreach`` picks PyTorch's
    multi-tensor implementation (faster, but with temporaries the size of the parameters).
    """
    name = names.optimizer(name)
    lr = arguments.positive("lr", lr)
    if weight_decay is None:
        weight_decay = _ADAMW_DEFAULT_WEIGHT_DECAY if name == "adamw" else 0.0
    weight_decay = arguments.nonnegative("weight_decay", weight_decay)
    arguments.optional(arguments.boolean, "foreach", foreach)
    if name in ("sgd", "momentum"):
        return torch.optim.SGD(
            params, lr=lr, momentum=0.9 if name == "momentum" else 0.0, weight_decay=weight_decay, foreach=foreach
        )
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, foreach=foreach)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=foreach)


MODELS = {"mlp": MLP, "cnn": SmallCNN, "transformer": TinyTransformer}


def build_model(name: str, **kwargs) -> nn.Module:
    """Make one of the course models by name: 'mlp', 'cnn' or 'transformer' (any case)."""
    return MODELS[arguments.choice("name", name, MODELS)](**kwargs)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (trainable) parameters."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    arguments.boolean("trainable_only", trainable_only)
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
