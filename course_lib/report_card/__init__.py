"""The benchmark report card: several saved ``course benchmark`` results side by side (notebook 07.1,
"Compare machines", and ``course report-card``).

A learner runs ``course benchmark`` on each machine they can reach (a laptop, a Colab CPU, a Colab T4),
collects the JSON files in one folder, and calls :func:`write_report_card` on it. The card is a PNG (one
panel per headline figure, one bar per result, the catalog's accelerators as dashed reference lines where
the catalog holds the same quantity) and one self-contained HTML page (the PNG embedded, a table of the
figures with the best result per row, each result's hardware, the files that were skipped and why, and
the reference rows with their sources).

Reference lines are data-sheet ceilings, not measurements: ``matmul_gflops`` against the dense fp32 and
bf16 peaks (TFLOP/s x 1000), ``memory_bandwidth_gbs`` against the memory bandwidth (a CPU result's figure is
one thread's copy by default, well below its own memory's ceiling), ``allreduce_gbs``
against the chip-to-chip link (GB/s per direction). A file that cannot be read as a result is skipped with
one line naming it and the reason; the other files are still compared.

Each part has its own file: ``reading`` (the files, each read or skipped, the labels), ``compare`` (the table of
figures and the reference rows, pure), ``page`` (the HTML page) and ``card`` (``ReportCard``, the figure, the
files written, the text); every name can be reached from here.
"""

from __future__ import annotations

from .card import HTML_NAME, PNG_NAME, ReportCard, card_figure, summary_text, write_report_card
from .compare import DEFAULT_REFERENCES, compare_table, process_values, reference_rows, step_times
from .reading import hardware_count

__all__ = [
    "ReportCard",
    "write_report_card",
    "compare_table",
    "process_values",
    "step_times",
    "card_figure",
    "reference_rows",
    "summary_text",
    "hardware_count",
    "DEFAULT_REFERENCES",
    "PNG_NAME",
    "HTML_NAME",
]
