"""course_lib.validate and course_lib.names: one wording for bad input, one vocabulary."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib import names, validate


@pytest.mark.parametrize("call, error, match", [
    (lambda: validate.positive("lr", "0.1"), TypeError, r"lr must be a number > 0, got str '0.1'"),
    (lambda: validate.positive("lr", 0), ValueError, "lr must be a number > 0, got 0.0"),
    (lambda: validate.positive("lr", True), TypeError, "got bool"),
    (lambda: validate.positive("lr", math.nan), ValueError, "finite"),
    (lambda: validate.positive("lr", math.inf), ValueError, "finite"),
    (lambda: validate.positive_int("n", 2.0), TypeError, "n must be an int >= 1, got float"),
    (lambda: validate.positive_int("n", 0), ValueError, "n must be an int >= 1, got 0"),
    (lambda: validate.integer("stage", 4, minimum=0, maximum=3), ValueError, ">= 0 and <= 3"),
    (lambda: validate.fraction("f", 1.0), ValueError, "> 0 and < 1"),
    (lambda: validate.choice("kernel", "daxpy", ("copy", "add")), ValueError, r"accepted values are \('copy', 'add'\)"),
    (lambda: validate.choice("kernel", 3, ("copy",)), TypeError, "must be a str"),
    (lambda: validate.int_list("sizes", "128"), TypeError, "list of ints"),
    (lambda: validate.int_list("sizes", []), ValueError, "empty"),
    (lambda: validate.int_list("sizes", [4, 0]), ValueError, "every entry of sizes"),
    (lambda: validate.boolean("flag", 1), TypeError, "True or False"),
    (lambda: validate.function("fn", 3), TypeError, "callable"),
])
def test_bad_values_name_the_argument_and_what_it_accepts(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_good_values_come_back_normalised():
    assert validate.positive("lr", np.float32(0.5)) == 0.5 and validate.positive_int("n", np.int64(3)) == 3
    assert validate.choice("kernel", " ADD ", ("copy", "add")) == "add"
    assert validate.choice("x", "gige", ("eth-1g",), aliases={"GigE": "eth-1g"}) == "eth-1g"
    assert validate.positive("bw", math.inf, allow_inf=True) == math.inf
    assert validate.optional(validate.positive_int, "n", None) is None
    assert validate.fraction("f", 1.0, allow_one=True) == 1.0


@pytest.mark.parametrize("spelling, canonical", [("fp32", "fp32"), ("Float32", "fp32"), (torch.float32, "fp32"),
                                                 ("BFLOAT16", "bf16"), (torch.bfloat16, "bf16"), ("half", "fp16"),
                                                 ("e4m3", "fp8"), ("double", "fp64")])
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
