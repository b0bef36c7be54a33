"""The library's structure in one place: its modules in layers, in the order they may import each other.

A module imports only modules listed before it (a test reads this list and checks every import, in any form,
also inside functions), and nothing below the presenting layer imports matplotlib or ipywidgets. The package
docstring and the authors' guide render this list; ``docs/library-map.md``, generated from the notebooks, says
which notebook uses what.
"""

from __future__ import annotations

#: (layer title, ((module, what it is for), ...)), bottom layer first; within a layer, in import order.
LAYERS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "vocabulary and checks",
        (
            ("layout", "this list"),
            ("arguments", "argument checks, one wording for every bad input"),
            ("seeds", "one rule for every derived seed: a base seed and the keys of one stream"),
            ("names", "dtypes, precisions, optimizers, device kinds"),
            ("lazy", "packages whose parts load on first use"),
            ("record", "what a lesson run measured, under stable keys: values, guesses and claims, logged"),
            ("claims", "a lesson's live checks: a measurement, its bound, and the no-effect case it rejects"),
        ),
    ),
    (
        "facts and basics",
        (
            ("catalog", "cited data tables (tables/*.json): accelerators, links, prices, machines"),
            (
                "devices",
                "what runs where: device, dtypes, backend and skipped demos, decided from a hardware description",
            ),
            ("hardware", "what is this machine: CPU, memory, accelerators, usable cores"),
            ("procs_child", "the child's side of procs: what can be sent to a child, what it runs first, its channel"),
            ("procs_tree", "process trees: kill a process with all it started, reap it, find what is left over"),
            ("procs_start", "how a child starts: forkserver with torch preloaded or a fresh interpreter, hung starts"),
            ("procs", "child processes that never outlive their caller, and one supervision loop"),
            ("files", "atomic file writes: a reader sees the old file or the new one, never half of one"),
            ("timing", "timing (interleaved, low quantile), FLOP counting, achieved bandwidth"),
            ("cpu", "free cores, thread pools, fp32 and bf16 speed measured now"),
            ("data", "small synthetic and real data sets"),
            ("models", "the course's small models and optimizers"),
            ("train", "the one training step, and a small loop"),
        ),
    ),
    (
        "cost models and measurement",
        (
            ("compute", "module 01: roofline, training FLOPs, time to train"),
            ("classical_ml", "module 01: classical ML on a CPU, a logistic regression's FLOPs and numpy steps"),
            (
                "memory",
                "module 02: estimator, meters, checkpointing, formulas, capped runs, data sets larger than memory",
            ),
            ("precision", "module 04: number formats, gradient underflow and loss scaling, slow-dtype guard"),
            ("comm", "module 03: processes that talk through torch.distributed, and the cost of their messages"),
            ("cost", "module 07: prices, energy and CO2 of a job, owned against cloud, storage"),
            ("decision", "module 07: the decision guide, from a job and its constraints to the hardware"),
        ),
    ),
    (
        "doing the work",
        (
            (
                "compression",
                "module 05: size, pruning, quantization, distillation, low rank, efficient layers, compared",
            ),
            ("parallel", "module 06: data, pipeline and tensor parallelism, fault tolerance, torchrun, federated"),
            ("benchmark", "module 07: the benchmark suite, energy, benchmarking discipline, quality, monitoring"),
        ),
    ),
    (
        "presenting it",
        (
            ("plots", "every figure: units on each axis, a title that states the claim"),
            ("widgets", "interactive calculators"),
            ("checks", "exercise checks and guess scoring"),
            ("runs", "a lesson run as one file, the atlas of recorded runs, and where this run falls among them"),
            ("classpage", "a folder of learners' run files merged into one offline page for the room (course class)"),
            ("doctor", "the hardware report and how the demos adapt here (course doctor)"),
            ("report_card", "machines compared side by side (course report-card)"),
            ("cli", "the course command"),
        ),
    ),
)

#: The first layer that may draw: matplotlib and ipywidgets are imported nowhere below it.
PRESENTING = 4


def order() -> list[str]:
    """Every module, bottom first: a module may import only those before it."""
    return [module for _, modules in LAYERS for module, _ in modules]


def layer_of(module: str) -> int:
    """The layer number of a top-level module of course_lib (``"memory"``, not ``"memory.limit"``)."""
    for number, (_, modules) in enumerate(LAYERS):
        if any(module == name for name, _ in modules):
            return number
    raise ValueError(f"{module!r} is not in course_lib.layout.LAYERS; add it where it belongs")


def text(markdown: bool = False) -> str:
    """The layer list as text: reST-like for the package docstring, or a Markdown list for the authors' guide."""
    lines = []
    for number, (title, modules) in enumerate(LAYERS):
        lines.append(f"{number}. **{title}**" if markdown else f"{number}. {title}")
        for module, what in modules:
            lines.append(f"   - `{module}`: {what}" if markdown else f"   - ``{module}``: {what}")
    return "\n".join(lines) + "\n"
