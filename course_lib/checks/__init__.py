"""Checks for the exercise notebooks: does your function give the right answers?

Each exercise ends with a call such as::

    checks.check("01/matmul_intensity", matmul_intensity)

(exercises 01-03: the cases, messages and reference live in ``registry`` and ``ex01``-``ex03``) or::

    checks.check_function(arithmetic_intensity, cases=[((2, 2, 2), 0.333)],
                          reference=compute.matmul_intensity, random_inputs=make_inputs)

It runs small fixed cases with known answers, then compares against a reference on random
inputs, and stops at the first difference with a message saying what was expected, what your
function returned, and a hint. An unfinished exercise (one that still raises
NotImplementedError) gets its own friendly message.

One import for every check; each part lives in its own file:

===================  ==========================================================================
``core``             ``check_function``, ``check_value``, ``check_largest``, ``CheckFailed``,
                     ``ExerciseNotDone``: the checks every exercise uses, and their messages
``registry``         ``check``: exercises 01-03's checks by name; ``ex01``, ``ex02``, ``ex03`` hold their cases,
                     wrong-answer messages, random inputs and references
``guesses``          ``score_guess``: a learner's prediction against the measurement; ``guess_first``:
                     the prediction lock (``COURSE_REVEAL=1`` shows answers without a guess)
``references``       ``gradscaler_step``, ``topk_step``: one step of a stateful object, as a function
``predictions``      ``check_prediction``: a prediction written as a function (exercise 01), its answer kept as a hash
``resume``           ``check_resume``: exercise 06's checkpoint and resume
``hardware_choice``  ``check_option_numbers``, ``check_hardware_choice``: exercise 07
===================  ==========================================================================
"""

from __future__ import annotations

from .core import CheckFailed, Checked, ExerciseNotDone, check_function, check_largest, check_value
from .guesses import GuessFirst, GuessScore, guess_first, revealing, score_guess
from .hardware_choice import (
    PICK_DEVICE_COUNTS,
    PICK_STATES_FRACTION,
    PICK_UTILIZATION,
    check_hardware_choice,
    check_option_numbers,
    pick_dtype,
)
from .predictions import check_prediction
from .registry import check
from .references import gradscaler_step, topk_step
from .resume import check_resume

# private names that notebooks and tests reach through the package: exercise 06's reference and exercise 07's
# counted references (a learner's code that reaches them is refused)
from .hardware_choice import _hardware_option as _hardware_option, _hardware_options as _hardware_options
from .references import _fewest_micro_batches as _fewest_micro_batches

__all__ = [
    "check",
    "CheckFailed",
    "Checked",
    "ExerciseNotDone",
    "check_function",
    "check_largest",
    "check_value",
    "GuessFirst",
    "GuessScore",
    "guess_first",
    "revealing",
    "score_guess",
    "gradscaler_step",
    "topk_step",
    "check_prediction",
    "check_resume",
    "PICK_DEVICE_COUNTS",
    "PICK_STATES_FRACTION",
    "PICK_UTILIZATION",
    "pick_dtype",
    "check_hardware_choice",
    "check_option_numbers",
]
