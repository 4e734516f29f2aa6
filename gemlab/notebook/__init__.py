"""Helpers for the notebooks: ``setup`` (the first cell's one call), ``viewer`` (episodes as
HTML), ``exercises`` (checked exercises) and their reference ``solutions``."""

from gemlab.notebook.setup import Setup, data_folder, preset_for, setup

__all__ = ["Setup", "data_folder", "preset_for", "setup"]
