"""The variants that ``comm.aggregation.compare_variants`` trains: each one's options checked before any rank
starts, and its setting in a few words for the table ("ratio=0.01, momentum=0.9")."""

from __future__ import annotations

from typing import Any

from .. import arguments
from .aggregation_bytes import _momentum, _period, _powersgd_rank, _ratio, method_name


_OPTIONS = (
    "method",
    "batch_size",
    "hidden",
    "optimizer",
    "lr",
    "ratio",
    "powersgd_rank",
    "period",
    "seed",
    "momentum",
    "error_feedback",
    "warm_start",
)


def _checked_variant(name: str, options: Any) -> dict[str, Any]:
    if not isinstance(options, dict):
        raise TypeError(
            f"variant {name!r} must be a dict of train_with_aggregation options, got {type(options).__name__}"
        )
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ValueError(f"variant {name!r}: unknown option(s) {unknown}; accepted options are {_OPTIONS}")
    out = dict(options)
    out["method"] = method_name(out.get("method", "none"))
    for key, check in (
        ("ratio", _ratio),
        ("powersgd_rank", _powersgd_rank),
        ("period", _period),
        ("momentum", _momentum),
    ):
        if key in out:
            out[key] = check(out[key])
    for key in ("batch_size", "hidden"):
        if key in out:
            out[key] = arguments.positive_int(key, out[key])
    if "seed" in out:
        out["seed"] = arguments.nonnegative_int("seed", out["seed"])
    for key in ("error_feedback", "warm_start"):
        if key in out:
            arguments.boolean(key, out[key])
    if (out.get("momentum", 0.0) > 0 or out["method"] == "dgc") and "optimizer" in out:
        from .. import names

        if names.optimizer(out["optimizer"]) != "sgd":
            raise ValueError(f"variant {name!r}: momentum and 'dgc' need optimizer='sgd'")
    return out


def _setting(options: dict[str, Any]) -> str:
    method = options["method"]
    text = {
        "none": "fp32",
        "fp16": "fp16",
        "powersgd": f"rank={options.get('powersgd_rank', 2)}",
        "topk": f"ratio={options.get('ratio', 0.01):g}",
        "dgc": f"ratio={options.get('ratio', 0.01):g}",
        "local_sgd": f"period={options.get('period', 8)}",
    }[method]
    if options.get("momentum", 0.0) > 0:
        text += f", momentum={options['momentum']:g}"
    if method == "powersgd" and not options.get("error_feedback", True):
        text += ", no error feedback"
    if method == "powersgd" and not options.get("warm_start", True):
        text += ", no warm start"
    return text
