"""Interactive calculators: each one is a thin ipywidgets wrapper around a pure, tested function
from a lower layer, so the numbers are the same with or without widgets.

Notebook 01: ``time_to_train_widget`` (over ``compute.time_to_train``).
Notebook 02: ``memory_calculator_widget`` (over ``memory.large_model_memory``).

Each ``<name>_widget`` shows ``<name>_text`` (same parameter names) and is built by ``_calculator``,
which also marks the page: the box has the DOM classes ``course-calculator`` and
``course-calculator-<name>``, each control ``course-param-<parameter>``, and the result line
``course-result``, so a browser test can find every control and check the shown result.

ipywidgets is imported only when a widget is built, and is not a dependency of the course: the
notebook runtime brings its own (7.x on Colab, 8.x locally via the ``lab`` extra); both work. Without it a
``*_widget`` call says so and returns None: each notebook prints the text twin just before it.
"""

from __future__ import annotations

import sys
from typing import Callable

from . import names
from .catalog import accelerators
from .compute import format_duration, time_to_train
from .memory import large_model_memory


def _ipywidgets(text_twin: str):
    """The ipywidgets module; where it is missing (a plain ``pip install``, VS Code without the ``lab`` extra), None,
    after saying so: the cell before each calculator prints its text twin, so the lesson goes on without it."""
    try:
        import ipywidgets
    except ImportError:
        print(
            f"ipywidgets is not installed here, so the sliders are left out; the line above, from "
            f"course_lib.widgets.{text_twin}(...), gives the same numbers (call it with your own values). For the "
            "sliders, run `%pip install ipywidgets` and restart the kernel."
        )
        return None
    return ipywidgets


def enable_colab_widgets() -> None:
    """On Colab, turn on the custom widget manager so ipywidgets render; elsewhere do nothing."""
    if "google.colab" in sys.modules:
        from google.colab import output  # type: ignore[import-not-found]

        output.enable_custom_widget_manager()


def _calculator(w, text: Callable[..., str], controls: dict):
    """A box of ``controls`` (parameter name -> control) over a line showing ``text(**their values)``.

    The line follows every change; a ValueError (e.g. a dtype this chip lacks) is shown in red.
    """
    enable_colab_widgets()
    out = w.HTML()
    out.add_class("course-result")

    def update(_=None) -> None:
        try:
            out.value = text(**{name: control.value for name, control in controls.items()})
        except ValueError as exc:
            out.value = f"<span style='color:#b00'>{exc}</span>"

    for name, control in controls.items():
        control.add_class(f"course-param-{name}")
        control.observe(update, names="value")
    update()
    box = w.VBox([*controls.values(), out])
    box.add_class("course-calculator")
    box.add_class(f"course-calculator-{text.__name__.removesuffix('_text')}")
    return box


def _log_slider(w, value: float, low: int, high: int, description: str):
    """A slider over 10**low .. 10**high. ipywidgets 8 moves the value onto the slider's step as soon as the
    slider is shown (124e6 would become 10**8.1), so there it has no step; 7.x keeps the value as given."""
    step = None if int(w.__version__.split(".")[0]) >= 8 else 0.1
    return w.FloatLogSlider(value=value, base=10, min=low, max=high, step=step, description=description)


def time_to_train_text(
    n_params: float, n_tokens: float, accelerator: str, dtype: str, utilization: float, n_devices: int
) -> str:
    """The sentence the widget shows (a pure function, tested without widgets)."""
    from .catalog import get_accelerator

    chip = get_accelerator(accelerator)
    seconds = time_to_train(n_params, n_tokens, chip.peak_flops(dtype), utilization, n_devices)
    return (
        f"{n_params:.3g} parameters x {n_tokens:.3g} tokens = {6 * n_params * n_tokens:.3g} FLOPs; "
        f"on {n_devices} x {chip.name} at {chip.peak_tflops[dtype]:g} TFLOP/s ({dtype}) and "
        f"{utilization:.0%} utilisation: {format_duration(seconds)}"
    )


def time_to_train_widget(
    n_params: float = 124e6,
    n_tokens: float = 2.5e9,
    accelerator: str = "t4",
    dtype: str = "fp16",
    utilization: float = 0.4,
    n_devices: int = 1,
):
    """Sliders for parameters, tokens, accelerator, dtype, utilisation and device count."""
    w = _ipywidgets("time_to_train_text")
    if w is None:
        return None
    chips, dtypes = [a.key for a in accelerators()], [d for d in names.DTYPES if d != "fp64"]
    return _calculator(
        w,
        time_to_train_text,
        {
            "n_params": _log_slider(w, n_params, 6, 12, "parameters"),
            "n_tokens": _log_slider(w, n_tokens, 6, 13, "tokens"),
            "accelerator": w.Dropdown(options=chips, value=accelerator, description="accelerator"),
            "dtype": w.Dropdown(options=dtypes, value=names.dtype(dtype), description="dtype"),
            "utilization": w.FloatSlider(value=utilization, min=0.05, max=1.0, step=0.05, description="utilisation"),
            "n_devices": w.IntSlider(value=n_devices, min=1, max=1024, description="devices"),
        },
    )


def memory_calculator_text(
    n_params: float,
    precision: str,
    optimizer: str,
    zero_stage: int,
    data_parallel: int,
    seq_len: int,
    batch: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
) -> str:
    """The lines the memory calculator shows (a pure function, tested without widgets)."""
    gb = 1e9
    m = large_model_memory(
        n_params, precision, optimizer, zero_stage, data_parallel, seq_len, batch, d_model, n_layers, n_heads
    )
    fits = [a.key for a in accelerators() if m["total"] <= 0.9 * a.memory_gb * gb]
    return (
        f"model states {m['model_states'] / gb:.1f} GB + activations {m['activations'] / gb:.1f} GB "
        f"= {m['total'] / gb:.1f} GB per device; fits (with 10% to spare) on: {', '.join(fits) or 'none'}"
    )


def memory_calculator_widget(
    n_params: float = 7e9,
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    zero_stage: int = 0,
    data_parallel: int = 1,
    seq_len: int = 2048,
    batch: int = 1,
    d_model: int = 4096,
    n_layers: int = 32,
    n_heads: int = 32,
):
    """Sliders for a transformer's size, precision, optimizer, ZeRO stage and batch (notebook 02)."""
    w = _ipywidgets("memory_calculator_text")
    if w is None:
        return None
    return _calculator(
        w,
        memory_calculator_text,
        {
            "n_params": _log_slider(w, n_params, 6, 12, "parameters"),
            "precision": w.Dropdown(
                options=list(names.PRECISIONS), value=names.precision(precision), description="precision"
            ),
            "optimizer": w.Dropdown(
                options=list(names.OPTIMIZERS), value=names.optimizer(optimizer), description="optimizer"
            ),
            "zero_stage": w.IntSlider(value=zero_stage, min=0, max=3, description="ZeRO stage"),
            "data_parallel": w.IntSlider(value=data_parallel, min=1, max=512, description="GPUs"),
            "seq_len": w.IntSlider(value=seq_len, min=128, max=32768, step=128, description="sequence"),
            "batch": w.IntSlider(value=batch, min=1, max=64, description="micro-batch"),
            "d_model": w.IntSlider(value=d_model, min=256, max=16384, step=256, description="d_model"),
            "n_layers": w.IntSlider(value=n_layers, min=1, max=128, description="layers"),
            "n_heads": w.IntSlider(value=n_heads, min=1, max=128, description="heads"),
        },
    )


def decision_guide_text(
    n_params: float,
    n_samples: float,
    tokens_per_sample: float,
    epochs: int,
    framework: str,
    budget_usd: float | None,
    deadline_hours: float | None,
    privacy: str,
    energy: str,
    precision: str,
    optimizer: str,
    finetune: bool = False,
    xla_ready: bool = False,
    utilization: float = 0.4,
    purchase_share: float = 1.0,
    spot: bool = False,
) -> str:
    """The recommendation the decision guide shows, with the assumptions it rests on and what flips it when
    each is changed alone (a pure function over ``decision.recommend``; notebook 07.3)."""
    from .decision import recommend

    rec = recommend(
        n_params,
        n_samples,
        tokens_per_sample=tokens_per_sample,
        epochs=epochs,
        framework=framework,
        budget_usd=budget_usd,
        deadline_hours=deadline_hours,
        privacy=privacy,
        energy=energy,
        precision=precision,
        optimizer=optimizer,
        finetune=finetune,
        xla_ready=xla_ready,
        utilization=utilization,
        purchase_share=purchase_share,
        spot=spot,
    )
    methods = "; ".join(m.split(":")[0] for m in rec.methods)
    assumed = "; ".join(a.split(":")[0] for a in rec.assumptions)
    flips = "; ".join(rec.flips)
    return f"{rec.headline()}. Methods, lightest first: {methods}. Assumed: {assumed}. Each changed alone: {flips}."


def decision_guide_widget(
    n_params: float = 124e6,
    n_samples: float = 2.5e9,
    tokens_per_sample: float = 1.0,
    epochs: int = 1,
    framework: str = "pytorch",
    budget_usd: float = 1000.0,
    deadline_hours: float = 168.0,
    privacy: str = "none",
    energy: str = "any",
    precision: str = "bf16-mixed",
    optimizer: str = "adam",
    finetune: bool = False,
    xla_ready: bool = False,
    utilization: float = 0.4,
    purchase_share: float = 1.0,
    spot: bool = False,
):
    """Sliders and menus for a training job and its constraints, over ``decision.recommend`` (notebook 07.3).

    Sizes, budget (USD) and deadline (hours) are on log scales; a very large budget or deadline means
    no limit (``decision_guide_text`` also takes None for them).
    """
    from .decision import ENERGY, FRAMEWORKS, PRIVACY

    w = _ipywidgets("decision_guide_text")
    if w is None:
        return None
    controls = {
        "n_params": _log_slider(w, n_params, 4, 12, "parameters"),
        "n_samples": _log_slider(w, n_samples, 2, 13, "samples"),
        "tokens_per_sample": _log_slider(w, tokens_per_sample, 0, 5, "tokens/sample"),
        "epochs": w.IntSlider(value=epochs, min=1, max=100, description="epochs"),
        "framework": w.Dropdown(options=list(FRAMEWORKS), value=framework, description="framework"),
        "budget_usd": _log_slider(w, budget_usd, 0, 8, "budget (USD)"),
        "deadline_hours": _log_slider(w, deadline_hours, -2, 5, "deadline (h)"),
        "privacy": w.Dropdown(options=list(PRIVACY), value=privacy, description="privacy"),
        "energy": w.Dropdown(options=list(ENERGY), value=energy, description="energy"),
        "precision": w.Dropdown(
            options=list(names.PRECISIONS), value=names.precision(precision), description="precision"
        ),
        "optimizer": w.Dropdown(
            options=list(names.OPTIMIZERS), value=names.optimizer(optimizer), description="optimizer"
        ),
        "finetune": w.Checkbox(value=finetune, description="fine-tune (price LoRA, QLoRA)"),
        "xla_ready": w.Checkbox(value=xla_ready, description="PyTorch code already runs on XLA"),
        "utilization": w.FloatSlider(value=utilization, min=0.05, max=1.0, step=0.05, description="utilisation"),
        "purchase_share": w.FloatSlider(
            value=purchase_share, min=0.05, max=1.0, step=0.05, description="purchase share"
        ),
        "spot": w.Checkbox(value=spot, description="Spot capacity (job checkpoints)"),
    }
    for control in controls.values():
        control.style.description_width = "100px"  # room for "tokens/sample" and "budget (USD)"
    return _calculator(w, decision_guide_text, controls)
