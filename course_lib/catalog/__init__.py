"""Cited data tables: what the common ML accelerators can do on paper.

Used by notebook 01 (processing units: the accelerator catalog and time-to-train
estimates) and by later notebooks: 02 (memory: the largest model that fits) and
03 (interconnect: how fast chips can talk to each other).

Every row says where its numbers come from (``source``) and when they were read
(``source_date``). Reading the table:

* ``peak_tflops`` holds **dense** peaks, in TFLOP/s (TOP/s for int8), one entry per
  dtype the chip runs in hardware. NVIDIA datasheets often print "with sparsity"
  figures (2:4 structured sparsity doubles the number); those are halved here and the
  row's ``notes`` say so.
* For NVIDIA GPUs, ``fp64`` and ``fp32`` are the plain (non-tensor-core) rates; every
  other dtype is the tensor-core rate. A dtype that is missing is one the chip has no
  fast hardware path for (T4 has no bf16) or one the vendor does not publish.
* ``memory_gb`` is the vendor's number, in the vendor's unit (Google writes GiB for
  some TPUs; see notes). The memory a framework can actually use is a little lower.
* ``interconnect_gbs`` is chip-to-chip bandwidth per chip **per direction**, the one
  convention of every bandwidth in the course (the link table's too). Vendors print the
  sum of both directions (NVLink "900 GB/s", TPU "bidirectional ICI"); those are halved.
  For PCIe-only cards it is the PCIe x16 link to the host (PCIe 3.0 x16 = 15.75 GB/s).
* ``pod_chips`` is how many chips that link joins: the GPUs of one NVLink server (8), a
  TPU pod (256 to 8,960), or 1 for a PCIe card, whose chips talk through the host.
* ``power_w`` is the TDP or maximum board power; ``None`` where the vendor does not
  publish one (recent Google TPUs).
* ``source_date`` is the month the numbers were checked against the source (vendor
  pages change over time), not the document's own publication date.

Peaks are ceilings, not predictions: real training reaches a fraction of them, which
is what the notebooks measure.

A second table, of storage and memory tiers (``storage_tiers()``, ``get_storage()``),
serves notebook 02 (memory: disk read throughput, RAM vs SSD vs HDD: how fast a data
set can be fed to the chip) and notebook 07 (choosing hardware). Each disk row is one
real product's datasheet figures, with the interface ceiling in its notes (SATA III
6 Gb/s ~ 0.6 GB/s; PCIe x4: 3.0 ~ 3.9, 4.0 ~ 7.9, 5.0 ~ 15.8 GB/s). Datasheet
sequential numbers are best cases: large sequential reads, often of a new (empty)
drive, sometimes from a cache or at the fastest (outer) tracks of a hard disk; random
IOPS are at a deep queue (QD16-QD32), not the one-request-at-a-time reads of a naive
data loader. Memory rows are per channel (per DIMM): a machine's peak bandwidth is
channels x per-channel figure.

A third table, of links (``links()``, ``get_link()``), serves notebook 03 (interconnect): what
PCIe, NVLink, InfiniBand, Ethernet and TPU ICI carry **per direction**, in GB/s. Vendors often
print the sum of both directions (NVLink "900 GB/s"); those are halved, network rates in Gb/s
are divided by 8, and each row's notes say so. The NVLink, TPU and PCIe rows must equal the
accelerator table's ``interconnect_gbs`` (per direction too) and the memory rows the storage
table's DDR rows: the schema test checks that the tables agree.

Where the numbers live
----------------------
The rows are package data files, ``course_lib/tables/<table>.json``: ``{"table", "about",
"kinds", "rows": [...], "aliases": {other name: key}}``, every row with its ``source`` (URLs,
separated by "; ") and ``source_date`` (YYYY-MM, when the numbers were checked). One loader,
:func:`load_table`, reads and checks any of them against its schema (``SCHEMAS``): required
fields, their types, known kinds, unique keys, aliases pointing at real keys. This package imports
only the standard library.

A fourth table, of prices (``prices()``, ``get_price()``), serves notebooks 06.5 (what a training
job costs) and 07.3 (choosing hardware), through ``course_lib.cost``: cloud on-demand and Spot
prices per accelerator-hour, purchase prices of consumer, pro and data-centre cards (with and
without ECC memory), electricity prices and PUE, grid carbon intensities, and USD per GB of
memory and storage. Cloud rows name a key of the accelerator table; the tests check that they do.

A fifth table, of Vertex AI machine types (``vertex_machines()``), lists the machine types a Vertex AI
custom job's worker pool can ask for and the accelerators each takes (Vertex AI's ``acceleratorType``
names and the ``acceleratorCount`` values): a selection, against which
``course_lib.parallel.vertex_job`` checks job specs.

Each part has its own file: ``rows`` (the row classes and their kinds), ``loading`` (``SCHEMAS``,
``load_table``, ``parse_table``) and ``lookup`` (each table's rows by kind and by name); every name can be
reached from here.
"""

from __future__ import annotations

from .loading import SCHEMAS, Table, load_table, normalize_name, parse_table
from .lookup import (
    accelerator_names,
    accelerators,
    catalog_rows,
    get_accelerator,
    get_link,
    get_price,
    get_storage,
    link_names,
    link_rows,
    links,
    price_names,
    prices,
    storage_names,
    storage_tiers,
    vertex_machines,
)
from .rows import (
    DTYPES,
    KINDS,
    LINK_KINDS,
    MACHINE_SERIES,
    PRICE_KINDS,
    STORAGE_KINDS,
    TABLES,
    TIERS,
    Accelerator,
    Link,
    Price,
    StorageTier,
    VertexMachine,
)

__all__ = [
    "DTYPES",
    "KINDS",
    "STORAGE_KINDS",
    "LINK_KINDS",
    "TABLES",
    "SCHEMAS",
    "Accelerator",
    "StorageTier",
    "Link",
    "Table",
    "load_table",
    "parse_table",
    "normalize_name",
    "accelerators",
    "accelerator_names",
    "get_accelerator",
    "catalog_rows",
    "storage_tiers",
    "storage_names",
    "get_storage",
    "links",
    "link_names",
    "get_link",
    "link_rows",
    "PRICE_KINDS",
    "TIERS",
    "Price",
    "prices",
    "price_names",
    "get_price",
    "MACHINE_SERIES",
    "VertexMachine",
    "vertex_machines",
]
