"""Tests for course_lib.catalog: the table is complete, cited, and physically sane."""

from __future__ import annotations

import ast
import math
import re
import sys
from pathlib import Path

import pytest

from course_lib import catalog
from course_lib.catalog import Accelerator, DTYPES

REQUIRED_KEYS = {
    "t4",
    "p100-16gb",
    "v100-16gb",
    "a100-40gb",
    "a100-80gb",
    "l4",
    "h100-sxm",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
}
# GPUs whose bf16/fp16 runs on tensor cores (the P100 has none).
TENSOR_CORE_GPUS = {"t4", "v100-16gb", "a100-40gb", "a100-80gb", "l4", "l40s", "h100-sxm", "h200"}

ALL = catalog.accelerators()


def by_key(key: str) -> Accelerator:
    return catalog.get_accelerator(key)


# ---- the table itself ------------------------------------------------------------


def test_required_rows_present_and_keys_unique():
    keys = catalog.accelerator_names()
    assert REQUIRED_KEYS <= set(keys)
    assert len(keys) == len(set(keys))
    assert [acc.key for acc in ALL] == keys


@pytest.mark.parametrize("acc", ALL, ids=lambda a: a.key)
def test_every_row_is_cited(acc: Accelerator):
    assert acc.source.startswith("http")
    for url in acc.source.split("; "):
        assert url.startswith("https://"), url
    assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", acc.source_date)
    assert acc.notes.strip()


@pytest.mark.parametrize("acc", ALL, ids=lambda a: a.key)
def test_every_number_is_positive_and_fields_are_valid(acc: Accelerator):
    assert acc.kind in catalog.KINDS
    assert acc.vendor in {"NVIDIA", "AMD", "Google"}
    assert 2010 <= acc.year <= 2030
    assert acc.peak_tflops, "every chip has at least one dtype"
    assert set(acc.peak_tflops) <= set(DTYPES)
    for value in acc.peak_tflops.values():
        assert value > 0 and math.isfinite(value)
    assert acc.memory_gb > 0
    assert acc.memory_bandwidth_gbs > 0
    assert acc.interconnect_gbs > 0
    assert acc.interconnect
    # Power is None only where the vendor publishes none (recent TPUs).
    if acc.power_w is None:
        assert acc.kind == "tpu"
    else:
        assert acc.power_w > 0


def test_rows_are_read_only_and_hashable():
    a100 = by_key("a100-40gb")
    with pytest.raises(TypeError):
        a100.peak_tflops["bf16"] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):
        a100.memory_gb = 1.0  # type: ignore[misc]
    assert len({hash(acc) for acc in ALL}) == len(ALL)


def test_unknown_dtype_in_a_new_row_is_rejected():
    with pytest.raises(ValueError, match="fp4"):
        Accelerator(
            key="x",
            name="X",
            vendor="NVIDIA",
            kind="gpu",
            year=2025,
            peak_tflops={"fp4": 1.0},
            memory_gb=1,
            memory_bandwidth_gbs=1,
            interconnect="PCIe",
            interconnect_gbs=1,
            power_w=1,
            source="https://example.com",
            source_date="2025-01",
        )


# ---- physical sanity -------------------------------------------------------------


@pytest.mark.parametrize("key", sorted(TENSOR_CORE_GPUS))
def test_tensor_cores_beat_plain_fp32(key: str):
    acc = by_key(key)
    half = max(acc.peak_tflops.get("bf16", 0), acc.peak_tflops.get("fp16", 0))
    assert half > acc.peak_tflops["fp32"]


def test_generations_get_faster():
    h100 = by_key("h100-sxm").peak_tflops["bf16"]
    a100 = by_key("a100-40gb").peak_tflops["bf16"]
    v100 = by_key("v100-16gb").peak_tflops["fp16"]
    assert h100 > a100 > v100


def test_a100_80gb_has_more_memory_and_no_less_bandwidth():
    small, big = by_key("a100-40gb"), by_key("a100-80gb")
    assert big.memory_gb > small.memory_gb
    assert big.memory_bandwidth_gbs >= small.memory_bandwidth_gbs
    assert big.peak_tflops == small.peak_tflops


def test_known_hardware_gaps():
    assert "bf16" not in by_key("t4").peak_tflops  # Turing has no bf16
    assert "bf16" not in by_key("v100-16gb").peak_tflops  # nor does Volta
    p100 = by_key("p100-16gb").peak_tflops
    # No tensor cores: fp16 is 2x fp32 through packed half2 math.
    assert p100["fp16"] == pytest.approx(2 * p100["fp32"], rel=0.01)
    assert "int8" not in p100 and "bf16" not in p100
    for key in ("h100-sxm", "h200", "l4", "l40s"):
        assert "fp8" in by_key(key).peak_tflops
    for key in ("a100-40gb", "a100-80gb", "t4", "v100-16gb"):
        assert "fp8" not in by_key(key).peak_tflops


def test_every_purchasable_card_has_a_catalog_row_that_agrees_with_it():
    """The decision guide (notebook 07.3) times every card it can buy: each purchase row names a catalog row with
    the same memory and power, and the AMD rows say that the frameworks reach them through ROCm."""
    for card in catalog.prices("purchase"):
        acc = catalog.get_accelerator(card.accelerator)
        assert acc.memory_gb == card.memory_gb and acc.power_w == card.power_w, card.key
        assert acc.vendor == card.vendor
        if acc.vendor == "AMD":
            assert "ROCm" in acc.notes
    ti = by_key("rtx-4060-ti-16gb").peak_tflops  # derived from the 353 "AI TOPS" as the RTX 4090's from its 1,321
    rtx = by_key("rtx-4090").peak_tflops
    assert ti["bf16"] / rtx["bf16"] == pytest.approx(353 / 1321, rel=0.01)
    assert "bf16" not in by_key("rx-7900-xtx").peak_tflops  # AMD prints no bf16 figure for it


def test_dense_not_sparse_figures():
    # Datasheets print these with sparsity as 3,958 (H100 fp8) and 242 (L4 bf16).
    assert by_key("h100-sxm").peak_tflops["fp8"] == pytest.approx(1979, rel=0.001)
    assert by_key("l4").peak_tflops["bf16"] == pytest.approx(121)
    assert by_key("a100-40gb").peak_tflops["tf32"] == 156
    assert by_key("mi300x").peak_tflops["bf16"] == pytest.approx(1307.4)  # AMD: 2,614.9 with sparsity


def test_pcie_cards_report_their_link_bandwidth_per_direction():
    # 8, 16, 32 GT/s x 128/130 x lanes / 8 bits, one way (the RTX 4060 Ti has 8 lanes).
    expected = {"PCIe 3.0 x16": 15.75, "PCIe 4.0 x16": 31.5, "PCIe 5.0 x16": 63.0, "PCIe 4.0 x8": 15.75}
    for acc in ALL:
        if acc.interconnect.startswith("PCIe"):
            assert acc.interconnect_gbs == pytest.approx(expected[acc.interconnect], rel=0.005)
            assert acc.pod_chips == 1, "a PCIe card has no chip-to-chip link of its own"


def test_links_are_per_direction_and_pods_sized():
    # Vendors print NVLink and ICI as both-direction totals (H100 900 GB/s, v5p 1,200 GB/s): halved here.
    assert by_key("h100-sxm").interconnect_gbs == 450 and by_key("tpu-v5p").interconnect_gbs == 600
    assert "per direction" in by_key("h100-sxm").notes
    assert by_key("h100-sxm").pod_chips == 8 and by_key("tpu-v5p").pod_chips == 8960
    for acc in ALL:
        assert acc.pod_chips >= 1
        if acc.interconnect.startswith(("NVLink", "ICI", "Infinity Fabric")):
            assert acc.pod_chips > 1


@pytest.mark.parametrize("pod", [0, -8, 2.5, True, "8"])
def test_bad_pod_size_is_rejected(pod):
    with pytest.raises(ValueError, match="pod_chips"):
        Accelerator(
            key="x",
            name="X",
            vendor="NVIDIA",
            kind="gpu",
            year=2025,
            peak_tflops={"fp32": 1.0},
            memory_gb=1,
            memory_bandwidth_gbs=1,
            interconnect="NVLink",
            interconnect_gbs=1,
            power_w=1,
            source="https://example.com",
            source_date="2025-01",
            pod_chips=pod,
        )


# ---- peak_flops ------------------------------------------------------------------


def test_peak_flops_is_in_flop_per_second():
    assert by_key("a100-40gb").peak_flops("bf16") == 312e12
    assert by_key("tpu-v5e").peak_flops("bf16") == 197e12
    assert by_key("t4").peak_flops("fp16") == 65e12


def test_peak_flops_unknown_or_unsupported_dtype():
    t4 = by_key("t4")
    with pytest.raises(ValueError) as err:
        t4.peak_flops("bf16")
    message = str(err.value)
    assert "bf16" in message and "fp16" in message and "int8" in message
    with pytest.raises(ValueError, match="float128"):
        t4.peak_flops("float128")


# ---- lookups ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, key",
    [
        ("a100-80gb", "a100-80gb"),
        ("A100-80GB", "a100-80gb"),
        ("A100 80GB", "a100-80gb"),
        ("NVIDIA A100 80GB SXM", "a100-80gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("a100", "a100-40gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("h100", "h100-sxm"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("Tesla T4", "t4"),
        ("T4", "t4"),
        ("Tesla P100-PCIE-16GB", "p100-16gb"),
        ("v100", "v100-16gb"),
        ("  L4 ", "l4"),
        ("v5e", "tpu-v5e"),
        ("TPU v5 lite", "tpu-v5e"),
        ("TPU v4", "tpu-v4"),
        ("tpu_v4", "tpu-v4"),
        ("v5p", "tpu-v5p"),
        ("Trillium", "tpu-v6e"),
    ],
)
def test_get_accelerator_aliases_and_case(name: str, key: str):
    assert catalog.get_accelerator(name).key == key


@pytest.mark.parametrize("acc", ALL, ids=lambda a: a.key)
def test_every_key_and_full_name_resolves_to_itself(acc: Accelerator):
    assert catalog.get_accelerator(acc.key) is acc
    assert catalog.get_accelerator(acc.name) is acc
    assert catalog.get_accelerator(acc.name.upper()) is acc


def test_get_accelerator_unknown_name():
    with pytest.raises(ValueError) as err:
        catalog.get_accelerator("GeForce 256")
    message = str(err.value)
    assert "name" in message
    assert "a100-40gb" in message and "tpu-v5e" in message


@pytest.mark.parametrize("bad", [None, 100, b"a100", ["a100"]])
def test_get_accelerator_non_str(bad):
    with pytest.raises(TypeError):
        catalog.get_accelerator(bad)


def test_accelerators_by_kind():
    gpus, tpus = catalog.accelerators("gpu"), catalog.accelerators(kind="tpu")
    assert gpus and tpus
    assert all(a.kind == "gpu" for a in gpus) and all(a.kind == "tpu" for a in tpus)
    assert len(gpus) + len(tpus) == len(ALL)
    assert all(a.vendor == "Google" for a in tpus)


def test_accelerators_unknown_kind():
    with pytest.raises(ValueError, match="fpga"):
        catalog.accelerators(kind="fpga")


def test_accelerators_returns_a_fresh_list():
    catalog.accelerators().clear()
    assert len(catalog.accelerators()) == len(ALL)


# ---- catalog_rows ----------------------------------------------------------------


def test_catalog_rows_one_per_accelerator():
    rows = catalog.catalog_rows()
    assert [r["key"] for r in rows] == catalog.accelerator_names()
    expected_columns = {
        "key",
        "name",
        "kind",
        "year",
        "dtype",
        "peak_tflops",
        "memory_gb",
        "memory_bandwidth_gbs",
        "interconnect",
        "interconnect_gbs",
        "pod_chips",
        "power_w",
        "source",
    }
    for row in rows:
        assert set(row) == expected_columns
        assert row["dtype"] == "bf16"


def test_catalog_rows_none_for_unsupported_dtype():
    rows = {r["key"]: r for r in catalog.catalog_rows("bf16")}
    assert rows["t4"]["peak_tflops"] is None
    assert rows["a100-40gb"]["peak_tflops"] == 312
    fp8 = {r["key"]: r["peak_tflops"] for r in catalog.catalog_rows(dtype="fp8")}
    assert fp8["a100-40gb"] is None and fp8["h100-sxm"] > 0


def test_catalog_rows_unknown_dtype():
    with pytest.raises(ValueError, match="fp4"):
        catalog.catalog_rows("fp4")


# ---- module hygiene --------------------------------------------------------------


STDLIB_ONLY = ("catalog", "names", "arguments")  # the catalog and the course modules it may use
CATALOG = Path(catalog.__file__).parent  # the catalog package
STDLIB_FILES = sorted(CATALOG.glob("*.py")) + [CATALOG.parent / f"{m}.py" for m in STDLIB_ONLY if m != "catalog"]


@pytest.mark.parametrize("path", STDLIB_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_catalog_imports_only_the_standard_library(path):
    """The tables load anywhere: the catalog's files and the two course modules it uses import only the stdlib."""
    top = 2 if path.parent == CATALOG else 1  # the relative import level that reaches course_lib itself
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                assert node.level <= top, f"{path.name} imports from outside course_lib"
                if node.level < top:  # the catalog's own files
                    targets = ["catalog"]
                else:
                    targets = [node.module.split(".")[0]] if node.module else [a.name for a in node.names]
                assert set(targets) <= set(STDLIB_ONLY), f"{path.name} imports course_lib.{targets}"
            else:
                imported.add(node.module.split(".")[0])
    imported -= {"torch"} if path.name == "names.py" else set()  # names imports torch inside torch_dtype() only
    assert imported <= set(sys.stdlib_module_names), imported - set(sys.stdlib_module_names)


def test_the_stdlib_check_sees_every_catalog_file():
    assert {p.name for p in STDLIB_FILES} >= {"__init__.py", "rows.py", "loading.py", "lookup.py", "names.py"}


def test_public_functions_are_documented_and_typed():
    for name in ("accelerators", "accelerator_names", "get_accelerator", "catalog_rows"):
        fn = getattr(catalog, name)
        assert fn.__doc__ and "return" in fn.__annotations__
    assert Accelerator.peak_flops.__doc__


# ---- storage and memory tiers ----------------------------------------------------

from course_lib.catalog import STORAGE_KINDS, StorageTier  # noqa: E402

STORAGE = catalog.storage_tiers()
REQUIRED_STORAGE_KEYS = {"hdd-7200", "sata-ssd", "nvme-pcie3", "nvme-pcie4", "nvme-pcie5", "ddr4-3200", "ddr5-4800"}


def tier(key: str) -> StorageTier:
    return catalog.get_storage(key)


def test_storage_required_rows_present_and_keys_unique():
    keys = catalog.storage_names()
    assert REQUIRED_STORAGE_KEYS <= set(keys)
    assert len(keys) == len(set(keys))
    assert [t.key for t in STORAGE] == keys


@pytest.mark.parametrize("t", STORAGE, ids=lambda t: t.key)
def test_every_storage_row_is_cited(t: StorageTier):
    assert t.source.startswith("http")
    for url in t.source.split("; "):
        assert url.startswith("https://"), url
    assert re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", t.source_date)
    assert t.notes.strip() and t.capacity_note.strip() and t.name.strip()


@pytest.mark.parametrize("t", STORAGE, ids=lambda t: t.key)
def test_every_storage_number_is_positive(t: StorageTier):
    assert t.kind in STORAGE_KINDS
    assert t.sequential_read_gbs > 0 and math.isfinite(t.sequential_read_gbs)
    for value in (t.random_read_iops, t.latency_us):
        assert value is None or (value > 0 and math.isfinite(value))
    if t.kind == "memory":
        assert t.random_read_iops is None  # IOPS are meaningless for RAM
    if t.kind == "disk":
        assert t.random_read_iops is not None


def test_storage_sequential_read_ordering():
    hdd, sata, gen3, gen4 = (tier(k).sequential_read_gbs for k in ("hdd-7200", "sata-ssd", "nvme-pcie3", "nvme-pcie4"))
    assert hdd < sata < gen3 < gen4 < tier("nvme-pcie5").sequential_read_gbs


def test_storage_random_iops_and_latency_ordering():
    assert tier("hdd-7200").random_read_iops < tier("sata-ssd").random_read_iops
    assert tier("sata-ssd").random_read_iops < tier("nvme-pcie4").random_read_iops
    # An HDD access is milliseconds, an SSD access tens of microseconds.
    assert tier("hdd-7200").latency_us >= 1000
    assert tier("sata-ssd").latency_us < tier("hdd-7200").latency_us / 10


def test_storage_interface_ceilings():
    # Datasheet numbers stay below the link: SATA III ~0.6 GB/s, PCIe x4 3.0/4.0/5.0.
    assert tier("sata-ssd").sequential_read_gbs <= 0.6
    assert tier("nvme-pcie3").sequential_read_gbs <= 3.94
    assert tier("nvme-pcie4").sequential_read_gbs <= 7.88
    assert tier("nvme-pcie5").sequential_read_gbs <= 15.76


def test_dram_channel_bandwidth_is_jedec_arithmetic_and_beats_disks():
    ddr4, ddr5 = tier("ddr4-3200"), tier("ddr5-4800")
    assert ddr4.sequential_read_gbs == pytest.approx(3200e6 * 8 / 1e9)  # 25.6
    assert ddr5.sequential_read_gbs == pytest.approx(4800e6 * 8 / 1e9)  # 38.4
    assert ddr4.sequential_read_gbs > tier("sata-ssd").sequential_read_gbs
    assert ddr4.sequential_read_gbs > tier("nvme-pcie4").sequential_read_gbs
    assert ddr5.sequential_read_gbs > ddr4.sequential_read_gbs
    for t in (ddr4, ddr5):
        assert t.kind == "memory"
        assert "channels populated x" in t.notes  # machine = channels x per-channel


def test_storage_rows_are_read_only_and_kind_is_checked():
    with pytest.raises(AttributeError):
        tier("sata-ssd").sequential_read_gbs = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="tape"):
        StorageTier(
            key="x",
            name="X",
            kind="tape",
            sequential_read_gbs=1,
            random_read_iops=None,
            latency_us=None,
            capacity_note="",
            source="https://example.com",
            source_date="2025-01",
        )


@pytest.mark.parametrize(
    "name, key",
    [
        ("hdd-7200", "hdd-7200"),
        ("HDD-7200", "hdd-7200"),
        ("HDD", "hdd-7200"),
        ("SATA SSD", "sata-ssd"),
        ("sata_ssd", "sata-ssd"),
        ("870 EVO", "sata-ssd"),
        ("NVMe-PCIe3", "nvme-pcie3"),
        ("990 PRO", "nvme-pcie4"),
        ("nvme gen4", "nvme-pcie4"),
        ("  DDR4 ", "ddr4-3200"),
        ("ddr5-4800", "ddr5-4800"),
    ],
)
def test_get_storage_aliases_and_case(name: str, key: str):
    assert catalog.get_storage(name).key == key


@pytest.mark.parametrize("t", STORAGE, ids=lambda t: t.key)
def test_every_storage_key_and_name_resolves_to_itself(t: StorageTier):
    assert catalog.get_storage(t.key) is t
    assert catalog.get_storage(t.key.upper()) is t
    assert catalog.get_storage(t.name) is t


def test_get_storage_unknown_name():
    with pytest.raises(ValueError) as err:
        catalog.get_storage("floppy")
    message = str(err.value)
    assert "name" in message and "floppy" in message
    assert "sata-ssd" in message and "nvme-pcie4" in message


@pytest.mark.parametrize("bad", [None, 7200, b"hdd", ["hdd"]])
def test_get_storage_non_str(bad):
    with pytest.raises(TypeError):
        catalog.get_storage(bad)


def test_storage_tiers_by_kind():
    disks, memory = catalog.storage_tiers("disk"), catalog.storage_tiers(kind="memory")
    assert disks and memory
    assert all(t.kind == "disk" for t in disks) and all(t.kind == "memory" for t in memory)
    network = catalog.storage_tiers("network")
    assert len(disks) + len(memory) + len(network) == len(STORAGE)


def test_storage_tiers_unknown_kind():
    with pytest.raises(ValueError) as err:
        catalog.storage_tiers(kind="tape")
    message = str(err.value)
    assert "tape" in message and "disk" in message and "memory" in message


def test_storage_tiers_returns_a_fresh_list():
    catalog.storage_tiers().clear()
    assert len(catalog.storage_tiers()) == len(STORAGE)


def test_storage_functions_are_documented_and_typed():
    for name in ("storage_tiers", "storage_names", "get_storage"):
        fn = getattr(catalog, name)
        assert fn.__doc__ and "return" in fn.__annotations__
    assert "notebook 02" in catalog.__doc__ and "notebook 07" in catalog.__doc__
