"""course_lib.compression.size: bytes on disk and in memory, zeros, parameters (notebooks 05.1-05.4)."""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn
from torch.nn.utils import prune

from course_lib import compression, models
from course_lib.compression import size


def test_the_package_loads_its_parts_on_first_use():
    assert compression.size is size
    with pytest.raises(AttributeError, match="its parts are"):
        compression.nothing_here  # noqa: B018


def test_bytes_on_disk_and_in_memory_follow_the_parameter_count():
    m = models.MLP(hidden=[256, 256])
    n = sum(p.numel() for p in m.parameters())
    assert size.count_parameters(m) == n
    assert size.memory_bytes(m) == 4 * n
    on_disk = size.state_dict_bytes(m)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    assert on_disk == len(buf.getvalue()) and 4 * n < on_disk < 4 * n + 20_000  # the format adds a few KB
    half = models.MLP(hidden=[256, 256]).half()
    assert size.memory_bytes(half) == 2 * n


def test_zeros_cost_bytes_until_compressed():
    torch.manual_seed(0)
    m = models.MLP(hidden=[512])
    dense_file, dense_zip = size.state_dict_bytes(m), size.compressed_bytes(m)
    prune.l1_unstructured(m[0], "weight", amount=0.9)
    prune.remove(m[0], "weight")
    assert size.sparsity(m) == pytest.approx(0.9 * 64 * 512 / (64 * 512 + 512 * 10), rel=1e-3)
    assert size.state_dict_bytes(m) == dense_file  # zeros are stored like any other value
    assert size.compressed_bytes(m) < 0.6 * dense_zip  # but they compress
    assert size.count_parameters(m, nonzero=True) < 0.25 * size.count_parameters(m)


def test_a_pruned_module_counts_its_masked_weight_and_pays_for_the_mask():
    m = models.MLP(hidden=[128])
    before = size.memory_bytes(m)
    prune.l1_unstructured(m[0], "weight", amount=0.5)
    assert size.count_parameters(m) == sum(p.numel() for p in models.MLP(hidden=[128]).parameters())
    assert size.count_parameters(m, nonzero=True) == size.count_parameters(m) - 64 * 128 // 2
    assert size.memory_bytes(m) == before + 2 * 4 * 64 * 128  # weight_orig stays, plus the mask and the masked weight
    prune.remove(m[0], "weight")
    assert size.memory_bytes(m) == before


def test_sparse_and_quantized_tensors_are_measured_inside():
    dense = torch.zeros(100, 100)
    dense[0, :10] = 1.0
    csr = dense.to_sparse_csr()
    assert size.tensor_bytes(csr) == 101 * 8 + 10 * 8 + 10 * 4
    assert size.tensor_bytes(dense.to_sparse()) == 2 * 10 * 8 + 10 * 4
    twice = torch.sparse_coo_tensor(torch.tensor([[0, 0], [1, 1]]), torch.tensor([1.0, 2.0]), (3, 3))
    assert not twice.is_coalesced() and size.tensor_bytes(twice) == 2 * 1 * 8 + 1 * 4  # counted coalesced


def test_bad_input():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        size.state_dict_bytes("model")
    with pytest.raises(TypeError, match="torch.Tensor"):
        size.tensor_bytes([1.0])
    with pytest.raises(ValueError, match="level"):
        size.compressed_bytes(nn.Linear(2, 2), level=12)
    with pytest.raises(ValueError, match="no weight"):
        size.sparsity(nn.ReLU())


def test_int8_weights_from_torchao_are_a_quarter_of_fp32():
    from course_lib.compression import quantization

    if (problem := quantization.torchao_problem()) is not None:  # missing, or a release that does not fit this torch
        pytest.skip(problem)
    import torchao.quantization as torchao_quantization

    m = models.MLP(hidden=[256, 256])
    fp32 = size.memory_bytes(m)
    torchao_quantization.quantize_(m, torchao_quantization.Int8WeightOnlyConfig())
    weights = 64 * 256 + 256 * 256 + 256 * 10
    # int8 values (1 byte each) plus one fp32 scale per output row; biases stay fp32
    assert size.memory_bytes(m) >= weights and size.memory_bytes(m) < 0.3 * fp32
