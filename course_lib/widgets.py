"""Interactive calculators: each one is a thin ipywidgets wrapper around a pure, tested function
from a lower layer, so the numbers are the same with or without widgets.

Notebook 01: ``time_to_train_widget`` (over ``compute.time_to_train``).
"""
from __future__ import annotations

import sys

from .catalog import accelerators
from .compute import format_duration, time_to_train


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
    import ipywidgets as w

    enable_colab_widgets()
    names = [a.key for a in accelerators()]
    log_params = w.FloatLogSlider(value=n_params, base=10, min=6, max=12, description="parameters")
    log_tokens = w.FloatLogSlider(value=n_tokens, base=10, min=6, max=13, description="tokens")
    chip = w.Dropdown(options=names, value=accelerator, description="accelerator")
    kind = w.Dropdown(options=["fp32", "tf32", "bf16", "fp16", "fp8", "int8"], value=dtype, description="dtype")
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
