"""Interactive calculators: each one is a thin ipywidgets wrapper around a pure, tested function
from a lower layer, so the numbers are the same with or without widgets.

Notebook 01: ``time_to_train_widget`` (over ``compute.time_to_train``).
Notebook 02: ``memory_calculator_widget`` (over ``memory.large_model_memory``).

ipywidgets is imported only when a widget is built, and is not a dependency of the course: the
notebook runtime brings its own (7.x on Colab, 8.x locally via the ``lab`` extra); both work.
"""
from __future__ import annotations

import sys

from . import names
from .catalog import accelerators
from .compute import format_duration, time_to_train
from .memory import large_model_memory


def _ipywidgets(text_twin: str):
    """The ipywidgets module, or an ImportError that says how to get it and what to use meanwhile."""
    try:
        import ipywidgets
    except ImportError as exc:
        raise ImportError(f"This calculator needs ipywidgets: run `pip install ipywidgets` (in a notebook: "
                          f"`%pip install ipywidgets`). Without it, course_lib.widgets.{text_twin}(...) gives "
                          "the same numbers as text.") from exc
    return ipywidgets


def enable_colab_widgets() -> None:
    """On Colab, turn on the custom widget manager so ipywidgets render; elsewhere do nothing."""
    if "google.colab" in sys.modules:
        from google.colab import output  # type: ignore[import-not-found]

        output.enable_custom_widget_manager()


def time_to_train_text(n_params: float, n_tokens: float, accelerator: str, dtype: str, utilization: float,
                       n_devices: int) -> str:
    """The sentence the widget shows (a pure function, tested without widgets)."""
    from .catalog import get_accelerator

    chip = get_accelerator(accelerator)
    seconds = time_to_train(n_params, n_tokens, chip.peak_flops(dtype), utilization, n_devices)
    return (f"{n_params:.3g} parameters x {n_tokens:.3g} tokens = {6 * n_params * n_tokens:.3g} FLOPs; "
            f"on {n_devices} x {chip.name} at {chip.peak_tflops[dtype]:g} TFLOP/s ({dtype}) and "
            f"{utilization:.0%} utilisation: {format_duration(seconds)}")


def time_to_train_widget(n_params: float = 124e6, n_tokens: float = 2.5e9, accelerator: str = "t4",
                         dtype: str = "fp16", utilization: float = 0.4, n_devices: int = 1):
    """Sliders for parameters, tokens, accelerator, dtype, utilisation and device count."""
    w = _ipywidgets("time_to_train_text")

    enable_colab_widgets()
    chips = [a.key for a in accelerators()]
    log_params = w.FloatLogSlider(value=n_params, base=10, min=6, max=12, description="parameters")
    log_tokens = w.FloatLogSlider(value=n_tokens, base=10, min=6, max=13, description="tokens")
    chip = w.Dropdown(options=chips, value=accelerator, description="accelerator")
    kind = w.Dropdown(options=[d for d in names.DTYPES if d != "fp64"], value=names.dtype(dtype), description="dtype")
    util = w.FloatSlider(value=utilization, min=0.05, max=1.0, step=0.05, description="utilisation")
    devices = w.IntSlider(value=n_devices, min=1, max=1024, description="devices")
    out = w.HTML()

    def update(_=None) -> None:
        try:
            out.value = time_to_train_text(log_params.value, log_tokens.value, chip.value, kind.value,
                                           util.value, devices.value)
        except ValueError as exc:  # e.g. a dtype this chip lacks
            out.value = f"<span style='color:#b00'>{exc}</span>"

    for control in (log_params, log_tokens, chip, kind, util, devices):
        control.observe(update, names="value")
    update()
    return w.VBox([log_params, log_tokens, chip, kind, util, devices, out])


def memory_calculator_text(n_params: float, precision: str, optimizer: str, zero_stage: int, data_parallel: int,
                           seq_len: int, batch: int, d_model: int, n_layers: int, n_heads: int) -> str:
    """The lines the memory calculator shows (a pure function, tested without widgets)."""
    gb = 1e9
    m = large_model_memory(n_params, precision, optimizer, zero_stage, data_parallel, seq_len, batch, d_model,
                           n_layers, n_heads)
    fits = [a.key for a in accelerators() if m["total"] <= 0.9 * a.memory_gb * gb]
    return (f"model states {m['model_states'] / gb:.1f} GB + activations {m['activations'] / gb:.1f} GB "
            f"= {m['total'] / gb:.1f} GB per device; fits (with 10% to spare) on: {', '.join(fits) or 'none'}")


def memory_calculator_widget(n_params: float = 7e9, precision: str = "bf16-mixed", optimizer: str = "adam",
                             zero_stage: int = 0, data_parallel: int = 1, seq_len: int = 2048, batch: int = 1,
                             d_model: int = 4096, n_layers: int = 32, n_heads: int = 32):
    """Sliders for a transformer's size, precision, optimizer, ZeRO stage and batch (notebook 02)."""
    w = _ipywidgets("memory_calculator_text")

    enable_colab_widgets()
    c = {
        "n_params": w.FloatLogSlider(value=n_params, base=10, min=6, max=12, description="parameters"),
        "precision": w.Dropdown(options=list(names.PRECISIONS), value=names.precision(precision), description="precision"),
        "optimizer": w.Dropdown(options=list(names.OPTIMIZERS), value=names.optimizer(optimizer), description="optimizer"),
        "zero_stage": w.IntSlider(value=zero_stage, min=0, max=3, description="ZeRO stage"),
        "data_parallel": w.IntSlider(value=data_parallel, min=1, max=512, description="GPUs"),
        "seq_len": w.IntSlider(value=seq_len, min=128, max=32768, step=128, description="sequence"),
        "batch": w.IntSlider(value=batch, min=1, max=64, description="micro-batch"),
        "d_model": w.IntSlider(value=d_model, min=256, max=16384, step=256, description="d_model"),
        "n_layers": w.IntSlider(value=n_layers, min=1, max=128, description="layers"),
        "n_heads": w.IntSlider(value=n_heads, min=1, max=128, description="heads"),
    }
    out = w.HTML()

    def update(_=None) -> None:
        try:
            out.value = memory_calculator_text(**{k: v.value for k, v in c.items()})
        except ValueError as exc:
            out.value = f"<span style='color:#b00'>{exc}</span>"

    for control in c.values():
        control.observe(update, names="value")
    update()
    return w.VBox([*c.values(), out])
