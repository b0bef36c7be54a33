"""Helper library for the course "Training ML models on the hardware you have".

Modules, by layer (``course_lib.layout.LAYERS``, rendered below: a module imports only those listed
before it; ``docs/library-map.md`` says which notebook uses what).

``import course_lib`` stays light: it imports torch but not matplotlib or ipywidgets.
"""

from __future__ import annotations

from . import layout
from .hardware import detect, pick_device
from .seeds import seed_everything

__doc__ = (__doc__ or "") + "\n" + layout.text()

__version__ = "0.5.0"
__all__ = ["detect", "pick_device", "seed_everything", "__version__"]
