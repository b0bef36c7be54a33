"""course_lib.arguments and course_lib.names: one wording for bad input, one vocabulary."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib import arguments, names


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: arguments.positive("lr", "0.1"), TypeError, r"lr must be a number > 0, got str '0.1'"),
        (lambda: arguments.positive("lr", 0), ValueError, "lr must be a number > 0, got 0.0"),
        (lambda: arguments.positive("lr", True), TypeError, "got bool"),
        (lambda: arguments.positive("lr", math.nan), ValueError, "finite"),
        (lambda: arguments.positive("lr", math.inf), ValueError, "finite"),
        (lambda: arguments.positive_int("n", 2.0), TypeError, "n must be an int >= 1, got float"),
        (lambda: arguments.positive_int("n", 0), ValueError, "n must be an int >= 1, got 0"),
        (lambda: arguments.integer("stage", 4, minimum=0, maximum=3), ValueError, ">= 0 and <= 3"),
        (lambda: arguments.fraction("f", 1.0), ValueError, "> 0 and < 1"),
        (
            lambda: arguments.choice("kernel", "daxpy", ("copy", "add")),
            ValueError,
            r"accepted values are \('copy', 'add'\)",
        ),
        (lambda: arguments.choice("kernel", 3, ("copy",)), TypeError, "must be a str"),
        (lambda: arguments.int_list("sizes", "128"), TypeError, "list of ints"),
        (lambda: arguments.int_list("sizes", []), ValueError, "empty"),
        (lambda: arguments.int_list("sizes", [4, 0]), ValueError, "every entry of sizes"),
        (lambda: arguments.boolean("flag", 1), TypeError, "True or False"),
        (lambda: arguments.function("fn", 3), TypeError, "callable"),
    ],
)
def test_bad_values_name_the_argument_and_what_it_accepts(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_good_values_come_back_normalised():
    assert arguments.positive("lr", np.float32(0.5)) == 0.5 and arguments.positive_int("n", np.int64(3)) == 3
    assert arguments.choice("kernel", " ADD ", ("copy", "add")) == "add"
    assert arguments.choice("x", "gige", ("eth-1g",), aliases={"GigE": "eth-1g"}) == "eth-1g"
    assert arguments.positive("bw", math.inf, allow_inf=True) == math.inf
    assert arguments.optional(arguments.positive_int, "n", None) is None
    assert arguments.fraction("f", 1.0, allow_one=True) == 1.0


@pytest.mark.parametrize(
    "spelling, canonical",
    [
        ("fp32", "fp32"),
        ("Float32", "fp32"),
        (torch.float32, "fp32"),
        ("BFLOAT16", "bf16"),
        (torch.bfloat16, "bf16"),
        ("half", "fp16"),
        ("e4m3", "fp8"),
        ("double", "fp64"),
    ],
)
def test_one_vocabulary_for_dtypes(spelling, canonical):
    assert names.dtype(spelling) == canonical


def test_torch_dtypes_and_sizes():
    assert names.torch_dtype("bf16") is torch.bfloat16 and names.bytes_per_element("int8") == 1
    assert names.bytes_per_element(torch.float64) == 8
    with pytest.raises(ValueError, match="accepted values"):
        names.torch_dtype("tf32")  # a matmul mode, not a storage type
    with pytest.raises(TypeError, match="dtype"):
        names.dtype(4)


def test_precisions_optimizers_devices():
    assert names.precision("BF16") == "bf16-mixed" and names.precision_dtype("fp16-mixed") == "fp16"
    assert names.optimizer("AdamW") == "adamw" and names.OPTIMIZER_STATE_BUFFERS["adam"] == 2
    assert names.device_kind("CUDA") == "cuda"
    with pytest.raises(ValueError, match="use 'cuda'"):
        names.device_kind("gpu")
    with pytest.raises(ValueError, match="use 'xla'"):
        names.device_kind("TPU")
