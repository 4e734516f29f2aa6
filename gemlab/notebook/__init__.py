"""Helpers for the notebooks: ``setup`` (the first cell's one call); the views, each in a module
named for what it shows (``token_views``, ``episode_views``, ``datum_views``, ``live_metrics``,
``game_widget``, all returning ``html_block.Html`` blocks, tables or figures) and gathered for the
notebooks in ``viewer``; ``exercises`` (checked exercises) and their reference ``solutions``."""

from gemlab.notebook.setup import Setup, data_folder, preset_for, setup

__all__ = ["Setup", "data_folder", "preset_for", "setup"]
