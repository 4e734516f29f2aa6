"""The notebooks' views under one name: ``from gemlab.notebook import viewer``, then
``viewer.episode_html(...)``. Each view lives in the module named for what it shows; this module
only gathers them for the notebooks (and for code written against ``gemlab.notebook.viewer``)."""

from gemlab.notebook.datum_views import datum_html, datum_table, plot_datum
from gemlab.notebook.episode_views import episode_html, episode_stats, episode_table, episodes_html, new_text
from gemlab.notebook.game_widget import InteractiveGame
from gemlab.notebook.html_block import Html, side_by_side
from gemlab.notebook.live_metrics import LiveMetrics, metrics_table
from gemlab.notebook.token_views import (
    compare_templates,
    logprob_table,
    render_tokens,
    template_token_counts,
    token_strings,
)

__all__ = [
    "Html",
    "InteractiveGame",
    "LiveMetrics",
    "compare_templates",
    "datum_html",
    "datum_table",
    "episode_html",
    "episode_stats",
    "episode_table",
    "episodes_html",
    "logprob_table",
    "metrics_table",
    "new_text",
    "plot_datum",
    "render_tokens",
    "side_by_side",
    "template_token_counts",
    "token_strings",
]
