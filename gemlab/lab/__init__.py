"""The hyperparameter lab: widgets that train for real, with live curves and runs side by side.

- ``controls``: the settings as widgets, turned into a checked ``Config``;
- ``background``: steps awaited from the kernel's event loop, ETA, clean stop;
- ``comparison``: run folders found, labelled by the settings that differ, overlaid, tabled;
- ``watch``: a saved policy plays one episode;
- ``hyperparameter_lab``: ``HyperparameterLab``, the widget that puts them together (notebook 07).
"""

from gemlab.lab.controls import COMPARISONS, Controls
from gemlab.lab.hyperparameter_lab import HyperparameterLab

__all__ = ["COMPARISONS", "Controls", "HyperparameterLab"]
