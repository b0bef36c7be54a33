"""Exercise 07's checks: picking hardware for a job, with the course's estimators.

The reference numbers are computed inside this module (``_option``, ``_options``), out of the learner's reach: no
public callable returns an answer. A learner's function that names one of the checks' private functions is refused
before it runs; one that reaches ``_hardware_option`` or ``_hardware_options`` another way (``vars(checks)``) is
refused after it ran, since those two count every call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from .core import CheckFailed, Checked, _call, _close, _names_used, _show, check_function


#: The rules of exercise 07's search (the decision guide of notebook 07.3 uses richer ones).
PICK_DEVICE_COUNTS = (1, 2, 4, 8)
PICK_STATES_FRACTION = 0.8  # model states may fill 80 % of a device (memory.largest_model_that_fits)
PICK_UTILIZATION = 0.4
_SCENARIO_KEYS = (
    "name",
    "n_params",
    "tokens",
    "precision",
    "optimizer",
    "deadline_hours",
    "budget_usd",
    "privacy",
    "kinds",
)
_PICK_KEYS = ("hardware", "devices", "zero_stage", "memory_gb", "hours", "usd")
_PACKAGE = __name__.rpartition(".")[0]  # course_lib.checks


def pick_dtype(accelerator: str) -> str:
    """The 16-bit dtype exercise 07 times an accelerator at: bf16 where the chip has it, else fp16 (a T4)."""
    from .. import catalog

    return "bf16" if "bf16" in catalog.get_accelerator(accelerator).peak_tflops else "fp16"


def _scenario(scenario: Any) -> dict:
    if not isinstance(scenario, dict) or set(_SCENARIO_KEYS) - set(scenario):
        raise TypeError(f"a scenario is a dict with the keys {', '.join(_SCENARIO_KEYS)}, got {scenario!r}")
    return scenario


def _option(scenario: dict, hardware: str, devices: int) -> dict:
    """Exercise 07's reference numbers for ``devices`` x ``hardware`` on ``scenario``.

    ``zero_stage``: the lowest ZeRO stage whose model states per device (``memory.model_states_bytes``)
    fill at most ``PICK_STATES_FRACTION`` of the device (None when none does); ``memory_gb`` (10^9
    bytes) at that stage (stage 3 when none fits); ``hours`` and, rented, ``usd`` from
    ``cost.training_footprint`` (6 x parameters x tokens FLOPs at ``PICK_UTILIZATION``, perfect scaling);
    a regulated scenario buys its cards: ``usd`` = devices x ``cost.purchase_price`` + what they need around them,
    ``cost.host_share(hardware, devices)["usd"]`` (a server share per data-centre card, one workstation per
    ``cost.DESK_MAX`` desk cards). ``feasible`` adds the deadline, the budget and a known price.
    """
    from .. import catalog, compute, cost
    from ..memory import model_states_bytes

    s = _scenario(scenario)
    acc = catalog.get_accelerator(hardware)
    if acc.kind not in s["kinds"]:
        raise ValueError(
            f"{acc.key} is a {acc.kind.upper()}, and this team's framework runs on: {', '.join(s['kinds'])}"
        )
    capacity = PICK_STATES_FRACTION * acc.memory_gb * 1e9
    stages = (0,) if devices == 1 else (0, 1, 2, 3)
    per_stage = {z: model_states_bytes(int(s["n_params"]), s["precision"], s["optimizer"], z, devices) for z in stages}
    zero = next((z for z in stages if per_stage[z] <= capacity), None)
    flops = compute.training_flops(s["n_params"], s["tokens"])
    foot = cost.training_footprint(
        flops, acc.key, chips=devices, utilization=PICK_UTILIZATION, dtype=pick_dtype(acc.key)
    )
    owned = s["privacy"] == "regulated"
    try:
        usd = (
            (devices * cost.purchase_price(acc.key) + cost.host_share(acc.key, devices)["usd"])
            if owned
            else foot["usd"]
        )
    except ValueError:
        usd = None
    feasible = zero is not None and usd is not None and foot["hours"] <= s["deadline_hours"] and usd <= s["budget_usd"]
    return {
        "hardware": acc.key,
        "devices": devices,
        "zero_stage": zero,
        "memory_gb": per_stage[stages[-1] if zero is None else zero] / 1e9,
        "hours": foot["hours"],
        "usd": usd,
        "where": "owned" if owned else "cloud",
        "feasible": feasible,
    }


def _options(scenario: dict) -> list[dict]:
    """Every option exercise 07 considers: each catalog accelerator of the scenario's ``kinds`` ("gpu",
    "tpu": the framework decides) with a price for it (rented on demand, or bought when the data may not
    leave the premises), on 1, 2, 4 or 8 devices."""
    from .. import catalog, cost

    s = _scenario(scenario)
    out = []
    for acc in catalog.accelerators():
        if acc.kind not in s["kinds"]:
            continue
        if s["privacy"] == "regulated":
            try:
                cost.purchase_price(acc.key)
            except ValueError:
                continue
        elif acc.key not in cost.priced_accelerators():
            continue
        out += [_option(s, acc.key, n) for n in PICK_DEVICE_COUNTS]
    return out


#: Calls of exercise 07's reference functions from outside the checks (a learner's code reaching them by a route
#: the name check below does not see); the checks reset it and refuse an answer that made any.
_OUTSIDE_CALLS = [0]


def _hardware_option(scenario: dict, hardware: str, devices: int) -> dict:
    """``_option``, counted in ``_OUTSIDE_CALLS``: the name the checks' package shows, which the checks never call."""
    _OUTSIDE_CALLS[0] += 1
    return _option(scenario, hardware, devices)


def _hardware_options(scenario: dict) -> list[dict]:
    """``_options``, counted in ``_OUTSIDE_CALLS``: the name the checks' package shows, which the checks never call."""
    _OUTSIDE_CALLS[0] += 1
    return _options(scenario)


def _private_functions() -> set[str]:
    """The names of the private functions of every part of ``course_lib.checks``."""
    from . import core, guesses, references, resume

    return {
        k
        for module in (core, guesses, references, resume, sys.modules[__name__])
        for k, v in vars(module).items()
        if callable(v) and k.startswith("_") and not k.startswith("__")
    }


def _refuse_references(fn: Callable, name: str, hint: str) -> None:
    """Refuse a learner's ``fn`` that is, or calls (itself or through functions of the notebook it calls), a
    function of this module that computes exercise 07's answers: it would pass whatever the learner wrote."""
    tip = f"\nHint: {hint}" if hint else ""
    module = getattr(fn, "__module__", None) or ""
    if module == _PACKAGE or module.startswith(_PACKAGE + ".") or fn in (_hardware_option, _hardware_options):
        raise CheckFailed(
            f"{name} is one of course_lib.checks' own functions, not yours: write the computation yourself.{tip}"
        )
    private = _private_functions() | {"check_hardware_choice", "check_option_numbers"}
    seen, todo = set(), [fn]
    while todo:
        f = todo.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        used = _names_used(f)
        if used & private:
            raise CheckFailed(
                f"{name} calls {', '.join(sorted(used & private))} of course_lib.checks, the code that "
                f"checks it, so it would pass whatever it computes: write the computation yourself "
                f"(the definitions above say what to compute).{tip}"
            )
        glob = getattr(f, "__globals__", {})
        todo.extend(
            g
            for k in used
            for g in (glob.get(k),)  # the notebook's own functions that it calls
            if hasattr(g, "__code__") and getattr(g, "__globals__", None) is glob
        )


def _call_refusing_references(fn: Callable, args: tuple, name: str, hint: str) -> Any:
    """``_call(fn, args)``, refused when ``fn`` reached exercise 07's reference functions while it ran."""
    _OUTSIDE_CALLS[0] = 0
    got = _call(fn, args, name, hint)
    if _OUTSIDE_CALLS[0]:
        raise CheckFailed(
            f"{name} called the reference functions of course_lib.checks, the code that checks it: "
            f"write the computation yourself (the definitions above say what to compute)."
            + (f"\nHint: {hint}" if hint else "")
        )
    return got


def check_hardware_choice(
    pick: Callable[[dict], dict], scenarios: Sequence[dict], *, hint: str = "", quiet: bool = False
) -> int:
    """Check a learner's ``pick(scenario) -> dict`` (exercise 07) on each scenario.

    The pick names ``hardware`` (a catalog key) and ``devices``, and defends it with ``zero_stage``,
    ``memory_gb``, ``hours`` and ``usd``. The check recomputes those numbers with the course's estimators
    (kept inside this module, out of the learner's reach; 2 % tolerance), then requires that the choice fits in
    memory, meets the
    deadline and the budget, and costs at most 2 % more than the cheapest option that does. Returns the
    number of scenarios checked; raises ``ExerciseNotDone`` or ``CheckFailed`` saying what is wrong.
    """
    if not callable(pick):
        raise TypeError(f"pick must be the function you wrote, got {type(pick).__name__}")
    _refuse_references(pick, "pick", hint)
    tip = f"\nHint: {hint}" if hint else ""
    edges = []  # each scenario again with its budget and deadline set to the cheapest option's: targets met exactly
    for s in scenarios:
        best = min((o for o in _options(s) if o["feasible"]), key=lambda o: o["usd"], default=None)
        if best is not None:
            edges.append(
                {
                    **s,
                    "name": f"{s['name']}, budget and deadline met exactly",
                    "budget_usd": best["usd"],
                    "deadline_hours": best["hours"],
                }
            )
    poor = None  # a team whose budget no option meets: the answer is None
    if scenarios:
        poor = {**scenarios[0], "name": f"{scenarios[0]['name']}, with a budget of one cent", "budget_usd": 0.01}
        if any(o["feasible"] for o in _options(poor)):
            poor = None
        else:
            edges.append(poor)
    for s in [*scenarios, *edges]:
        got = _call_refusing_references(
            pick, (s,), "pick", hint + (" A deadline or budget met exactly is met (<=, not <)." if s in edges else "")
        )
        if got is None or s is poor:
            nothing = not any(o["feasible"] for o in _options(s))
            if got is None and nothing:
                continue
            if got is None:
                raise CheckFailed(f"pick({s['name']!r}) returned None, but some option meets every constraint{tip}")
            raise CheckFailed(
                f"pick({s['name']!r}) returned {got.get('devices') if isinstance(got, dict) else got!r} "
                f"x {got.get('hardware') if isinstance(got, dict) else ''}, but no option meets every "
                f"constraint here: return None{tip}"
            )
        if not isinstance(got, dict) or set(_PICK_KEYS) - set(got):
            raise CheckFailed(
                f"pick({s['name']!r}) must return a dict with the keys {', '.join(_PICK_KEYS)}, got {got!r}{tip}"
            )
        try:
            ref = _option(s, got["hardware"], int(got["devices"]))
        except (ValueError, TypeError) as exc:
            raise CheckFailed(f"pick({s['name']!r}): {exc}{tip}") from None
        for key in ("zero_stage", "memory_gb", "hours", "usd"):
            if not _close(got[key], ref[key], 0.02, 1e-9):
                raise CheckFailed(
                    f"pick({s['name']!r}) chose {got['devices']} x {got['hardware']}: {key} should be "
                    f"{_show(ref[key])} by the course's estimators, you said {_show(got[key])}{tip}"
                )
        best = min((o for o in _options(s) if o["feasible"]), key=lambda o: o["usd"], default=None)
        if not ref["feasible"]:
            why = (
                "no ZeRO stage fits the model states in 80 % of its memory"
                if ref["zero_stage"] is None
                else f"it takes {ref['hours']:.3g} h (deadline {s['deadline_hours']} h)"
                if ref["hours"] > s["deadline_hours"]
                else f"it costs ${ref['usd']:,.0f} (budget ${s['budget_usd']:,})"
            )
            better = "; another option meets every constraint" if best else ""
            raise CheckFailed(
                f"pick({s['name']!r}): {got['devices']} x {got['hardware']} does not work: {why}{better}{tip}"
            )
        if best is not None and ref["usd"] > best["usd"] * 1.02:  # the message does not name the cheaper option
            raise CheckFailed(
                f"pick({s['name']!r}): {got['devices']} x {got['hardware']} works but costs "
                f"${ref['usd']:,.2f}; another option also meets every constraint for less: did you try "
                f"every accelerator the team may use, on every device count?{tip}"
            )
    if not quiet:
        print(
            f"\u2713 pick: the choice for each of the {len(scenarios)} scenarios (and {len(edges)} more: budgets and "
            "deadlines met exactly, and one budget nothing meets) fits, meets its deadline and budget, and is the "
            "cheapest that does"
        )
    return Checked(len(scenarios) + len(edges))


def check_option_numbers(
    option_numbers: Callable,
    scenarios: Sequence[dict],
    cases: Sequence[tuple] = (),
    *,
    hint: str = "",
    quiet: bool = False,
) -> int:
    """Check exercise 07's ``option_numbers(scenario, hardware, devices)`` against the course's numbers,
    computed inside this module (no reference callable is handed to the learner). ``cases``: (args,
    explanation) pairs from the notebook; added here: a model whose states fill exactly
    ``PICK_STATES_FRACTION`` of the device (it fits: at most, not less than) and 25 random jobs and options.
    """
    from .. import cost

    if not callable(option_numbers):
        raise TypeError(f"option_numbers must be the function you wrote, got {type(option_numbers).__name__}")
    _refuse_references(option_numbers, "option_numbers", hint)

    def ref(s, hardware, devices):
        r = _option(s, hardware, devices)
        return {k: r[k] for k in _PICK_KEYS}

    exact = {
        **scenarios[0],
        "name": "states fill exactly 80 %",
        "n_params": 4e9,
        "precision": "bf16-mixed",
        "optimizer": "adam",
        "privacy": "none",
        "kinds": ("gpu", "tpu"),
    }  # 16 B x 4e9 = 64 GB = 0.8 x 80 GB
    fixed = [(args, ref(*args), why) for args, why in cases]
    fixed.append(
        (
            (exact, "h100-sxm", 1),
            ref(exact, "h100-sxm", 1),
            "16 B x 4e9 parameters = 64 GB, exactly 80 % of an H100's 80 GB: at most 80 % fits (<=, not <).",
        )
    )

    def random_option(rng):
        s = dict(
            name="random",
            n_params=10 ** rng.uniform(7, 10.5),
            tokens=10 ** rng.uniform(8, 11),
            precision=rng.choice(["fp32", "bf16-mixed"]),
            optimizer=rng.choice(["sgd", "momentum", "adam"]),
            deadline_hours=100,
            budget_usd=1e6,
            privacy=rng.choice(["none", "regulated"]),
            kinds=("gpu", "tpu"),
        )
        pool = (
            sorted(o["hardware"] for o in _options(s) if o["devices"] == 1)
            if s["privacy"] == "regulated"
            else cost.priced_accelerators()
        )
        return s, rng.choice(pool), rng.choice(PICK_DEVICE_COUNTS)

    _OUTSIDE_CALLS[0] = 0
    refused = CheckFailed(
        "option_numbers called the reference functions of course_lib.checks, the code that checks "
        "it: write the computation yourself (the definitions above say what to compute)."
        + (f"\nHint: {hint}" if hint else "")
    )
    try:
        checked = check_function(
            option_numbers, fixed, reference=ref, random_inputs=random_option, rtol=1e-6, hint=hint, quiet=True
        )
    except CheckFailed:
        if _OUTSIDE_CALLS[0]:
            raise refused from None
        raise
    if _OUTSIDE_CALLS[0]:
        raise refused
    if not quiet:
        print(f"\u2713 {getattr(option_numbers, '__name__', 'option_numbers')}: all {checked} checks passed")
    return checked
