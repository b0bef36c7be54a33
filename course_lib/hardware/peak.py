"""A CPU's data-sheet peak: cores x clock x fp32 FLOPs per cycle, and the vendor facts that change the last."""

from __future__ import annotations

import os
import platform
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from .. import arguments
from .processor import _read

# fp32 operations one core can start per clock cycle: vector lanes x 2 (a fused multiply-add counts
# as two operations) x the number of FMA units. Typical desktop and server cores have two units;
# some chips have one (older or low-power cores, some AVX-512 parts) or four (Apple's cores), so
# this is a data-sheet-style estimate, good to about 2x, that notebook 00 checks with a measurement.
FP32_FLOPS_PER_CYCLE = {"AVX-512": 64, "AVX2": 32, "AVX": 16, "SSE": 8, "SVE": 32, "NEON": 16}


_BOOST_DRIVERS = ("intel_pstate", "amd-pstate", "amd_pstate")  # Linux drivers whose reported maximum is the boost


def cpu_clock_source(driver: str | None = None) -> str:
    """Which clock :func:`cpu_clock_ghz` reads: "maximum (boost)" where Linux's cpufreq driver is one that reports
    the boost limit (``intel_pstate``, ``amd-pstate``); "base or current" where the OS gives a maximum that may be
    the base clock (acpi-cpufreq reports the base as its maximum; macOS), or only the current clock (VMs, WSL2); ""
    where it reports none (notebook 00, section 4). ``driver`` stands in for the one in ``/sys``."""
    import psutil

    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):
        return ""
    if freq is None or not ((freq.max and freq.max > 0) or (freq.current and freq.current > 0)):
        return ""
    if driver is None:
        driver = _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver").strip()
    return "maximum (boost)" if freq.max and freq.max > 0 and driver.startswith(_BOOST_DRIVERS) else "base or current"


def cpu_clock_ghz() -> float | None:
    """The CPU's clock in GHz as the operating system reports it (the maximum, else the current one),
    or None where it does not say (``sheet_peak``, the peak estimate)."""
    import psutil

    try:
        freq = psutil.cpu_freq()
    except (OSError, NotImplementedError, AttributeError):  # some VMs and sandboxes hide it
        return None
    if freq is None:
        return None
    mhz = freq.max if freq.max and freq.max > 0 else freq.current
    return mhz / 1000 if mhz and mhz > 0 else None


def fp32_flops_per_cycle(vector_isa: str, vendor: str = "", family: int | None = None, *, model: str = "") -> int:
    """fp32 FLOPs one core starts per cycle: ``FP32_FLOPS_PER_CYCLE[vector_isa]``, except for the cores known to run
    512-bit instructions on 256-bit units (AMD Zen 4: vendor "AuthenticAMD", family 25 with AVX-512, which double-
    pumps them: 32 FLOP/cycle, as Zen 3's AVX2; Apple's M-series cores, whose four 128-bit NEON pipes give 32 where
    two-pipe Arm cores such as Neoverse N1 give 16). ``model`` (the CPU's name) picks out the AVX-512 chips with a
    single 512-bit FMA unit (``one_avx512_fma_unit``). ``sheet_peak`` uses it (the data-sheet peak)."""
    isa = arguments.choice("vector_isa", vector_isa, tuple(FP32_FLOPS_PER_CYCLE))
    if (
        isa == "AVX2"
        and vendor
        and (vendor, family) == cpu_vendor_family()
        and half_width_avx2(vendor, family, cpu_model_number())
    ):
        return 16  # this machine's own core: Zen, Zen+ or Gracemont
    if isa == "AVX-512" and vendor == "AuthenticAMD" and family == 25:
        return 32
    if isa == "AVX-512" and one_avx512_fma_unit(model, vendor, family):
        return 32
    if isa == "NEON" and vendor == "Apple":  # M-series performance cores: four 128-bit FMA pipes, not two
        return 32
    return FP32_FLOPS_PER_CYCLE[isa]


def fma_layout(vector_isa: str, vendor: str = "", family: int | None = None, *, model: str = "", blas: str = ""):
    """(fp32 lanes per FMA unit, FMA units per core) that PyTorch's products use: lanes x units x 2 (a fused
    multiply-add counts two FLOPs) = ``blas_flops_per_cycle(fp32_flops_per_cycle(...))``. AVX-512: 16 lanes x 2 units
    (Intel Xeon Gold 6xxx, Platinum; Zen 5 desktop and server), 16 x 1 (``one_avx512_fma_unit``), or 8 x 2 on Zen 4,
    which runs a 512-bit instruction as two 256-bit halves (AMD, Software Optimization Guide for Family 19h); AVX2
    and SVE 8 x 2; AVX 8 x 1 (a multiplier and an adder); SSE 4 x 1; NEON 4 x 2, Apple's cores 4 x 4. MKL on AMD
    counts 8 x 2 (``blas_flops_per_cycle``). ``SheetPeak.line`` prints it."""
    per_cycle = blas_flops_per_cycle(fp32_flops_per_cycle(vector_isa, vendor, family, model=model), vendor, blas)
    isa = "AVX2" if per_cycle < fp32_flops_per_cycle(vector_isa, vendor, family, model=model) else vector_isa
    lanes = {"AVX-512": 16, "AVX2": 8, "AVX": 8, "SVE": 8, "SSE": 4, "NEON": 4}[isa]
    if isa == "AVX2" and per_cycle == 16:  # Zen, Zen+, Gracemont: two 128-bit FMA units
        lanes = 4
    if isa == "AVX-512" and vendor == "AuthenticAMD" and family == 25:
        lanes = 8
    return lanes, per_cycle // (2 * lanes)


# MKL_ENABLE_INSTRUCTIONS values that hold MKL below AVX-512, and the vector level each leaves it
_MKL_HOLDS = {"AVX2": "AVX2", "AVX": "AVX", "SSE4_2": "SSE"}


def mkl_hold() -> str:
    """The vector level ``MKL_ENABLE_INSTRUCTIONS`` holds Intel's MKL to ("AVX2", "AVX", "SSE"), or "" where it is
    unset or allows AVX-512: MKL picks its own kernels, so PyTorch's own settings (``ATEN_CPU_CAPABILITY``) do not
    reach its float32 products."""
    return _MKL_HOLDS.get(os.environ.get("MKL_ENABLE_INSTRUCTIONS", "").strip().upper(), "")


def blas_flops_per_cycle(flops_per_cycle: int, vendor: str, blas: str) -> int:
    """fp32 FLOPs per cycle that PyTorch's matrix products can use: ``flops_per_cycle`` (``fp32_flops_per_cycle``),
    capped at AVX2's 32 where the BLAS is Intel's MKL on an AMD processor: MKL picks its code path by processor
    vendor and may not use AVX-512 on AMD (Intel's optimization notice), so the cap is a bound that a faster path
    would exceed, not a fact about the chip. Zen 5 desktop and server cores have full 512-bit units (64
    FLOP/cycle). Where ``MKL_ENABLE_INSTRUCTIONS`` holds MKL lower (``mkl_hold``), that level's count is the cap,
    a fact of the run. ``sheet_peak`` uses it."""
    per_cycle = arguments.nonnegative_int("flops_per_cycle", flops_per_cycle)
    if blas == "MKL" and mkl_hold():
        per_cycle = min(per_cycle, FP32_FLOPS_PER_CYCLE[mkl_hold()])
    if vendor == "AuthenticAMD" and blas == "MKL":
        return min(per_cycle, FP32_FLOPS_PER_CYCLE["AVX2"])
    return per_cycle


def library_flops_per_cycle(
    vector_isa: str, vendor: str = "", family: int | None = None, *, model: str = "", blas: str = ""
) -> int:
    """The most fp32 FLOPs per cycle the BLAS could reach on this core: ``fp32_flops_per_cycle``, capped only by a
    setting that holds MKL lower (``mkl_hold``), not by the vendor rule of ``blas_flops_per_cycle``, which may
    undercount. Notebook 00's one-core check widens its band by this over the counted FLOPs per cycle."""
    most = fp32_flops_per_cycle(vector_isa, vendor, family, model=model)
    return min(most, FP32_FLOPS_PER_CYCLE[mkl_hold()]) if blas == "MKL" and mkl_hold() else most


def bf16_dot_over_fp32(
    vector_isa: str, model: str = "", blas: str = "", *, vendor: str | None = None, family: int | None = None
) -> float:
    """The bf16 / fp32 speed of matrix products that a chip with AVX-512 BF16 (and no AMX) can reach, by hand
    (notebook 00): bf16 products (oneDNN, ``VDPBF16PS``: two bf16 multiply-adds per fp32 lane, Intel SDM) run at
    the chip's full vector rate (``fp32_flops_per_cycle``), fp32 products at the rate their BLAS uses
    (``blas_flops_per_cycle``). So 2x where the BLAS reaches the chip's full fp32 rate (Zen 4, Xeons); 4x with MKL on
    Zen 5 server and desktop chips, whose 512-bit units MKL's AVX2 path on AMD leaves half idle. ``vendor`` and
    ``family``: this CPU's where not given."""
    if vendor is None:
        vendor, family = cpu_vendor_family()
    per_cycle = fp32_flops_per_cycle(vector_isa, vendor, family, model=model)
    return 2 * per_cycle / blas_flops_per_cycle(per_cycle, vendor, blas)


# AVX-512 chips that start one 512-bit FMA per cycle, not two (32 fp32 FLOPs): Intel's client cores of the 10th
# (Ice Lake, "G" models) and 11th generations (Tiger Lake, Rocket Lake), and, among Xeon Scalable processors, only
# the first two generations (Skylake-SP, model numbers x1xx; Cascade Lake, x2xx): their Bronze 3xxx, Silver 4xxx
# and Gold 5xxx models, except the Gold 5122 and 5222 (Intel ARK, "# of AVX-512 FMA Units"; Intel 64 and IA-32
# Architectures Optimization Reference Manual, "one or two FMA units"). From Ice Lake-SP (x3xx) on, Silver and
# Gold 5xxx have two units, like Gold 6xxx and Platinum. And AMD's Zen 5 mobile chips (Ryzen AI 300), whose AVX-512
# runs on 256-bit data paths (AMD, Hot Chips 2024).
_ONE_FMA_INTEL = re.compile(
    r"\bi[3579]-10\d{2,3}G\d|11th Gen|\bi[3579]-11\d{3}"
    r"|Xeon(?:\(R\))? (?:Bronze 3|Silver 4)[12]\d\d|Xeon(?:\(R\))? Gold 5(?!122\b|222\b)[12]\d\d"
)


def one_avx512_fma_unit(model: str, vendor: str = "", family: int | None = None) -> bool:
    """Whether a CPU with AVX-512, named ``model``, starts only one 512-bit FMA per cycle (a pure function; see
    ``_ONE_FMA_INTEL``): Intel's Ice Lake and Tiger/Rocket Lake client chips, the Skylake-SP and Cascade Lake Xeon
    Bronze, Silver and Gold 5xxx (but the Gold 5122 and 5222), AMD Zen 5 mobile ("Ryzen AI" 300, family 26; not
    the Ryzen AI Max, Strix Halo, whose 512-bit units are full width: Chips and Cheese). The data-sheet peak of those
    chips is half the ISA's."""
    model = model or ""
    if vendor == "AuthenticAMD" or "AMD" in model:
        named = model.lower()
        return family == 26 and "ryzen ai" in named and "max" not in named
    return bool(_ONE_FMA_INTEL.search(model))


def sheet_peak_caveat(system: str, hybrid: bool, ghz: float | None, flops_per_cycle: int) -> str:
    """Why cores x clock x FLOPs per cycle cannot be trusted as this CPU's peak ("" where it can): no clock or
    vector unit reported; Windows, which reports the base clock while the cores boost far above it; a hybrid
    chip, whose performance and efficiency cores differ in clock and vector width."""
    if not ghz or flops_per_cycle < 16:
        return "this system does not report the CPU clock, or its vector unit is narrower than AVX"
    if system == "Windows":
        return "Windows reports the CPU's base clock, and its cores boost well above it, so the share has no ceiling"
    if hybrid:
        return (
            "this chip mixes performance and efficiency cores, which differ in clock and vector width: "
            "one data-sheet peak per core does not describe it"
        )
    return ""


def windows_vendor_family(processor: str) -> tuple[str, int | None]:
    """Vendor and family from Windows' processor string, e.g. "AMD64 Family 25 Model 97 Stepping 2, AuthenticAMD"
    -> ("AuthenticAMD", 25): Windows has no /proc/cpuinfo."""
    vendor = re.search(r"(AuthenticAMD|GenuineIntel)", processor or "")
    family = re.search(r"Family (\d+)", processor or "")
    return (vendor.group(1) if vendor else ""), (int(family.group(1)) if family else None)


def cpu_vendor_family() -> tuple[str, int | None]:
    """This x86 CPU's vendor id and family from /proc/cpuinfo ("AuthenticAMD", 25), ("Apple", None) on an Apple
    silicon Mac, or ("", None) elsewhere."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "Apple", None
    if sys.platform == "win32":
        return windows_vendor_family(platform.processor())
    try:
        text = Path("/proc/cpuinfo").read_text(errors="ignore")
    except OSError:
        return "", None
    vendor = re.search(r"^vendor_id\s*:\s*(\S+)", text, re.M)
    family = re.search(r"^cpu family\s*:\s*(\d+)", text, re.M)
    return (vendor.group(1) if vendor else ""), (int(family.group(1)) if family else None)


def cpu_model_number() -> int | None:
    """This x86 CPU's model number within its family, from /proc/cpuinfo (17 for a Zen 4 EPYC), None elsewhere."""
    found = re.search(r"^model\s*:\s*(\d+)", _read("/proc/cpuinfo"), re.M)
    return int(found.group(1)) if found else None


def half_width_avx2(vendor: str, family: int | None, number: int | None) -> bool:
    """Cores that run AVX2 on two 128-bit FMA units, 16 fp32 FLOPs a cycle, not 32: AMD Zen and Zen+ (family 23,
    models below 0x30; Zen 2 from 0x30 has 256-bit units) and Intel's Gracemont-only chips (family 6, model 0xBE:
    N100, N200, i3-N305; Chips and Cheese, "Gracemont: Revenge of the Atom Cores")."""
    if not isinstance(vendor, str):
        raise TypeError(f"vendor must be a string such as 'AuthenticAMD', not {type(vendor).__name__}")
    for name, value in (("family", family), ("number", number)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"{name} must be an int or None, not {type(value).__name__}")
    if number is None:
        return False
    return (vendor == "AuthenticAMD" and family == 23 and number < 0x30) or (
        vendor == "GenuineIntel" and family == 6 and number == 0xBE
    )


def cpu_peak_flops(cores: int, ghz: float, vector_isa: str, flops_per_cycle: int | None = None) -> float:
    """Data-sheet peak fp32 FLOP/s: cores x clock x FLOPs per cycle for ``vector_isa``, or
    ``flops_per_cycle`` where given (``fp32_flops_per_cycle`` knows the cores that differ from their ISA's).

    A pure function: ``cpu_peak_flops(2, 2.5, "AVX2")`` is 2 x 2.5e9 x 32 = 160 GFLOP/s.
    """
    arguments.positive_int("cores", cores)
    arguments.positive("ghz", ghz)
    isa = arguments.choice("vector_isa", vector_isa, tuple(FP32_FLOPS_PER_CYCLE))
    per_cycle = (
        FP32_FLOPS_PER_CYCLE[isa]
        if flops_per_cycle is None
        else arguments.positive_int("flops_per_cycle", flops_per_cycle)
    )
    return cores * ghz * 1e9 * per_cycle


@dataclass(frozen=True)
class SheetPeak:
    """This CPU's data-sheet fp32 peak (``sheet_peak``): ``flops`` is None where clock or vector unit is unknown;
    ``caveat`` says why it cannot be trusted here ("" where it can)."""

    flops: float | None
    cores: int
    ghz: float | None
    per_cycle: int
    caveat: str
    lanes: int = 0  # fp32 lanes per FMA unit (``fma_layout``); 0 where unknown
    why: str = ""  # why AVX-512 counts 8 lanes here: Zen 4's halves, or MKL's 256-bit path on AMD

    def caveat_for(self, examples: int, min_per_core: int = 256) -> str:
        """``caveat``, or, where there is none, why a step of ``examples`` split over ``cores`` leaves too little
        work per core (under ``min_per_core`` examples each) to be judged against this peak ("" where it can be)."""
        per_core = arguments.positive_int("examples", examples) // self.cores
        if self.caveat or per_core >= min_per_core:
            return self.caveat
        return f"{self.cores} cores share the {examples}-example step, {per_core} each: too little work per core"

    def line(self, measured: float) -> str:
        """One printed line: the data-sheet arithmetic beside a ``measured`` peak (FLOP/s)."""
        if not self.flops:
            return f"no data-sheet peak here: {self.caveat}"
        layout = (
            f"per core and cycle: {self.lanes} fp32 lanes x {self.per_cycle // (2 * self.lanes)} FMA units x 2 FLOP "
            f"per FMA (fused multiply-add, a x b + c) = {self.per_cycle} FLOP{f' ({self.why})' if self.why else ''}\n"
            if self.lanes
            else ""
        )
        text = layout + (
            f"data-sheet estimate: {self.cores} core(s) x {self.ghz:.2f} GHz (the clock the OS reports) x "
            f"{self.per_cycle} FLOP/cycle = {self.flops / 1e9:.0f} GFLOP/s; the measured peak is "
            f"{measured / self.flops:.2f}x that"
        )
        return text + (
            ": above 1, the cores ran faster than the reported clock (a base clock, boosted under load)"
            if measured > 1.02 * self.flops
            else ""
        )


def sheet_peak(cores: int, vector_isa: str, model: str = "", blas: str = "") -> SheetPeak:
    """Cores x clock x the fp32 FLOPs per cycle PyTorch's BLAS can use on this CPU (``fp32_flops_per_cycle``,
    ``blas_flops_per_cycle``), with ``sheet_peak_caveat``'s reasons not to trust it; on Apple's Accelerate, whose
    products run on a matrix unit the vector-unit count leaves out, always caveated. Notebook 01, sections 4 and 7."""
    from .processor import hybrid_cpu

    cores = arguments.positive_int("cores", cores)
    ghz, (vendor, family) = cpu_clock_ghz(), cpu_vendor_family()
    known = vector_isa in FP32_FLOPS_PER_CYCLE
    per_cycle = fp32_flops_per_cycle(vector_isa, vendor, family, model=model) if known else 0
    per_cycle = blas_flops_per_cycle(per_cycle, vendor, blas)
    lanes = fma_layout(vector_isa, vendor, family, model=model, blas=blas)[0] if known else 0
    flops = cpu_peak_flops(cores, ghz, vector_isa, per_cycle) if ghz and per_cycle else None
    caveat = sheet_peak_caveat(platform.system(), hybrid_cpu(), ghz, per_cycle)
    if blas == "Accelerate":
        caveat = "Accelerate runs products on Apple's matrix unit, which the vector-unit peak leaves out"
    why = ""
    if vector_isa == "AVX-512" and lanes == 8:
        why = (
            "MKL held to AVX2 by MKL_ENABLE_INSTRUCTIONS"
            if blas == "MKL" and mkl_hold()
            else "Zen 4: each 512-bit instruction runs as two 256-bit halves"
            if (vendor, family) == ("AuthenticAMD", 25)
            else "MKL's 256-bit path on AMD"
        )
    return SheetPeak(flops, cores, ghz, per_cycle, caveat, lanes, why)


_ONE_THREAD_RATE = (  # a fresh process: MKL reads MKL_ENABLE_INSTRUCTIONS once, when it loads
    "import sys\nfrom course_lib import timing\n"
    "print(timing.matmul_throughput([int(sys.argv[1])], num_threads=1)[0].flops_per_s / 1e9)"
)


def model_name_hidden(model: str) -> bool:
    """Whether a CPU's name carries no model number (a VM's "Intel(R) Xeon(R) Processor", or "... CPU @ 2.20GHz"):
    then the FMA-unit count read from the name is a default. Notebook 00 (section 4, Going deeper)."""
    if not isinstance(model, str):
        raise TypeError(f"model must be the CPU's name as a string, got {type(model).__name__}")
    return not any(ch.isdigit() for ch in model.split("@")[0])


def avx512_over_avx2(size: int = 1024, rounds: int = 2, timeout: float = 120.0) -> dict[str, float]:
    """One core's float32 ``size`` x ``size`` product rate (GFLOP/s, ``timing.matmul_throughput``) with Intel's MKL free
    and held to AVX2 (``MKL_ENABLE_INSTRUCTIONS=AVX2``), each in a fresh process, since MKL reads the setting once
    when it loads; ``rounds`` of the two in turn, the faster of each kept. Two 512-bit FMA units start twice
    AVX2's FLOPs per cycle, one unit as many, so the ratio tells them apart whatever the clock (less the lower
    clock some chips hold under AVX-512 code). Meaningful where the products run in MKL on an Intel chip with
    AVX-512 (elsewhere the setting changes nothing). Returns ``{"avx512_gflops", "avx2_gflops", "ratio"}``.
    Notebook 00 (Going deeper)."""
    import subprocess

    size = arguments.positive_int("size", size)
    rounds = arguments.positive_int("rounds", rounds)
    timeout = arguments.seconds("timeout", timeout)
    base = {k: v for k, v in os.environ.items() if k != "MKL_ENABLE_INSTRUCTIONS"}
    envs = {"avx512_gflops": base, "avx2_gflops": {**base, "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}
    rates: dict[str, float] = {k: 0.0 for k in envs}
    for _ in range(rounds):
        for key, env in envs.items():
            done = subprocess.run(
                [sys.executable, "-c", _ONE_THREAD_RATE, str(size)],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
            )
            if done.returncode != 0:
                raise RuntimeError(f"the timing process failed ({key}): {done.stderr.strip()[-500:]}")
            rates[key] = max(rates[key], float(done.stdout.split()[-1]))
    return {**rates, "ratio": rates["avx512_gflops"] / rates["avx2_gflops"]}
