"""The hyperparameter lab: set, Run, watch the curves grow, Stop, compare, watch a policy play.

``HyperparameterLab(base).widget`` is the ipywidgets box to display. Every button has a method
doing the same (``run()``, ``stop()``, ``run_preset(name)``, ``watch()``), and ``await lab.wait()``
waits for the runs in progress, so scripts and tests drive the lab exactly as a person does.
"""

from __future__ import annotations

import asyncio
import html
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import ipywidgets as widgets
import pandas as pd

from gemlab.backend import get_service_client, resolve_backend
from gemlab.config import Config
from gemlab.episodes import Episode
from gemlab.lab.background import eta_seconds, format_seconds, train_until
from gemlab.lab.comparison import comparison_figure, figure_png, find_runs, live_figure, runs_table
from gemlab.lab.controls import COMPARISONS, Controls
from gemlab.lab.watch import play_saved_policy
from gemlab.notebook.episode_views import episode_html
from gemlab.notebook.redraw import RedrawBudget
from gemlab.saved_runs import CHECKPOINTS_FILE, METRICS_FILE, SavedRun, read_run
from gemlab.trainer import Trainer, TrainingDiverged

LIVE_PANELS = (
    ("sampler/success_rate",),
    ("sampler/episode_return",),
    ("sampler/num_turns_per_episode",),
    ("sampler/token_entropy",),
    ("train/kl_sample_train_v1", "train/kl_sample_train_v2"),
    ("train/loss:sum",),
)
CURRENT = "the current run (an episode of its last step)"


class HyperparameterLab:
    """Widgets that train for real. ``base`` gives the defaults and everything the widgets do not
    set (model, backend, template); runs go to ``log_dir``; ``precomputed`` folders (such as
    ``data/runs``) are offered for comparison too."""

    def __init__(
        self, base: Config, *, log_dir: str | Path = "runs", precomputed: list[str | Path] | None = None
    ) -> None:
        self.base = base
        self.log_dir = Path(log_dir)
        self.precomputed = [Path(p) for p in precomputed or []]
        self._watch_service: Any = None  # the client that loads saved policies to watch them
        self.controls = Controls(base)
        self.trainer: Trainer | None = None
        self.task: asyncio.Task | None = None  # the runs started by Run or a preset
        self.watch_task: asyncio.Task | None = None  # a saved policy loading and playing
        self.live_redraws = 0  # how many times the live chart showed a new step
        self.redraw_budget = RedrawBudget()  # live redraws take at most 5% of a run's wall time
        self._live_steps = 0  # steps in the live chart on screen
        self.first_point_seconds: float | None = None  # from pressing Run to the first curve point
        self.last_status = ""  # how the last run ended: "finished", "stopped", "failed"
        self._stop = False
        self._refreshing = False
        self._last_episode: tuple[Episode, int, float] | None = None  # an episode of the last step, the step, gamma

        self.run_button = widgets.Button(description="Run", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop", disabled=True)
        self.preset_buttons = {
            name: widgets.Button(description=name, layout=widgets.Layout(width="auto")) for name in COMPARISONS
        }
        self.message = widgets.HTML()
        self.status = widgets.HTML("Set the controls and press <b>Run</b>.")
        # hidden until its first curve: an Image with no picture shows a broken-image icon
        self.live = widgets.Image(format="png", layout=widgets.Layout(max_width="100%", display="none"))
        self.run_picker = widgets.SelectMultiple(description="compare", rows=8, layout=widgets.Layout(width="560px"))
        self.refresh_button = widgets.Button(description="Refresh runs", icon="refresh")
        self.comparison = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.table = widgets.HTML()
        self.watch_picker = widgets.Dropdown(description="policy", layout=widgets.Layout(width="560px"))
        self.watch_button = widgets.Button(description="Play an episode", icon="eye")
        self.episode = widgets.HTML()

        self.run_button.on_click(lambda _: self.run())
        self.stop_button.on_click(lambda _: self.stop())
        for name, button in self.preset_buttons.items():
            button.on_click(lambda _, name=name: self.run_preset(name))
        self.refresh_button.on_click(lambda _: self.refresh())
        self.watch_button.on_click(lambda _: self.watch())
        self.run_picker.observe(lambda _: None if self._refreshing else self._draw_comparison(), names="value")

        def header(text: str) -> widgets.HTML:
            return widgets.HTML(f"<h3 style='margin:12px 0 4px 0'>{text}</h3>")

        self.widget = widgets.VBox(
            [
                header("Settings"),
                self.controls.box,
                widgets.HBox([self.run_button, self.stop_button]),
                widgets.HBox(
                    [widgets.HTML("<b>Presets</b> (runs one after another):&nbsp;"), *self.preset_buttons.values()]
                ),
                self.message,
                header("Live"),
                self.status,
                self.live,
                header("Compare"),
                widgets.HBox([self.run_picker, self.refresh_button]),
                self.comparison,
                self.table,
                header("Watch it play"),
                widgets.HBox([self.watch_picker, self.watch_button]),
                self.episode,
            ]
        )
        self.refresh()

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    # ----- buttons ----------------------------------------------------------------------------
    def run(self) -> None:
        """Start one run with the widgets' settings (the Run button)."""
        self._start([{}])

    def run_preset(self, name: str) -> None:
        """Start a preset comparison: its runs one after another (a preset button)."""
        self._start(COMPARISONS[name])

    def stop(self) -> None:
        """End the run after its current step, with a checkpoint; queued preset runs are dropped."""
        if self.task is not None and not self.task.done():
            self._stop = True
            self.stop_button.disabled = True
            self._say("Stopping after the current step (the checkpoint and metrics are kept)...")

    async def wait(self) -> None:
        """Wait until the runs started by Run or a preset are over."""
        if self.task is not None:
            await asyncio.shield(self.task)

    def refresh(self) -> None:
        """Find the run folders again: new ones under ``log_dir`` join the comparison."""
        folders = find_runs(self.log_dir, *self.precomputed)
        chosen = set(self.run_picker.value)
        known = set(self.run_picker.options)
        options = [str(p) for p in folders]
        mine = {o for o in options if Path(o).parent == self.log_dir}
        self._refreshing = True  # one redraw below, not one per change of the picker
        self.run_picker.options = options
        self.run_picker.value = tuple(o for o in options if o in chosen or (o not in known and o in mine))
        self._refreshing = False
        watchable = [o for o in options if (Path(o) / CHECKPOINTS_FILE).exists()]
        current = [CURRENT] if self._last_episode else []
        chosen_policy = self.watch_picker.value
        self.watch_picker.options = current + watchable[::-1]
        if self.watch_picker.options:
            self.watch_picker.value = (
                chosen_policy if chosen_policy in self.watch_picker.options else self.watch_picker.options[0]
            )
        self._draw_comparison()

    def watch(self) -> None:
        """Show an episode of the chosen policy in the episode viewer (the Play button)."""
        choice = self.watch_picker.value
        if choice is None:
            self.episode.value = "<i>No policy to watch yet: train a run first.</i>"
        elif choice == CURRENT:
            assert self._last_episode is not None  # CURRENT is offered once there is one
            episode, step, gamma = self._last_episode
            self.episode.value = episode_html(episode, gamma=gamma, title=f"An episode of step {step}").source
        else:
            self.episode.value = f"<i>Loading the policy of {html.escape(Path(choice).name)}...</i>"
            self.watch_task = asyncio.get_running_loop().create_task(self._watch_saved(Path(choice)))

    # ----- internals --------------------------------------------------------------------------
    def _say(self, text: str, *, error: bool = False, note: bool = False) -> None:
        color = "#b00020" if error else "#9a5b00" if note else "#1b5e20"
        self.message.value = f"<div style='color:{color}; font-weight:600'>{html.escape(text)}</div>" if text else ""

    def _new_run_name(self) -> str:
        stem = f"lab-{time.strftime('%Y%m%d-%H%M%S')}"
        name, index = stem, 2
        while (self.log_dir / name).exists():
            name, index = f"{stem}-{index}", index + 1
        return name

    def _start(self, runs: list[dict[str, Any]]) -> None:
        if self.task is not None and not self.task.done():
            self._say("A run is in progress: press Stop first.", error=True)
            return
        with warnings.catch_warnings(record=True) as caught:  # e.g. more envs than transitions
            warnings.simplefilter("always")
            try:  # check every run of the request before writing anything
                for overrides in runs:
                    self.controls.config(run_name="check", log_dir=str(self.log_dir), **overrides)
            except ValueError as error:
                self._say(f"Not started: {error}", error=True)
                return
        notes = sorted({str(warning.message) for warning in caught})
        self._say(f"Note: {'; '.join(notes)}" if notes else "", note=True)
        self._stop = False
        self._set_running(True)
        self.task = asyncio.get_running_loop().create_task(self._run_all(runs, time.time()))

    def _set_running(self, running: bool) -> None:
        self.run_button.disabled = running
        self.stop_button.disabled = not running
        for button in self.preset_buttons.values():
            button.disabled = running

    async def _run_all(self, runs: list[dict[str, Any]], pressed: float) -> None:
        try:
            for index, overrides in enumerate(runs):
                if self._stop:
                    break
                label = f" (preset run {index + 1} of {len(runs)})" if len(runs) > 1 else ""
                await self._run_one(overrides, pressed if index == 0 else time.time(), label)
        except Exception as error:  # the model or backend could not start: one line in the widget
            self.last_status = "failed"
            self._say(f"Run not started: {error}", error=True)
        finally:
            self._set_running(False)

    async def _run_one(self, overrides: dict[str, Any], pressed: float, label: str) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # shown when Run was pressed
            config = self.controls.config(run_name=self._new_run_name(), log_dir=str(self.log_dir), **overrides)
        self.status.value = f"Starting <b>{config.run_name}</b>{label}: loading the model..."
        # checkpoints go in the run folder
        self.trainer = trainer = await asyncio.to_thread(Trainer, config, progress=False)
        self.refresh()
        step_times: list[float] = []
        self.redraw_budget = budget = RedrawBudget()
        self._live_steps, self.last_status = 0, ""
        labels = {
            "train/kl_sample_train_v1": "sample-vs-train KL (nats)",
            "train/loss:sum": f"{config.loss_fn.replace('_', ' ')} loss (sum)",
        }
        started = time.time()

        async def on_step(metrics: dict[str, float]) -> None:
            step_times.append(metrics["time/step"])
            if trainer.last_batch is not None and trainer.last_batch.episodes:
                self._last_episode = (trainer.last_batch.episodes[0], int(metrics["step"]), config.gamma)
            done, total = trainer.step_index, config.max_steps
            eta = eta_seconds(step_times, total - done)
            if budget.due(final=done >= total):
                with budget.drawing():
                    await self._draw_live(
                        pd.DataFrame(trainer.history),
                        f"{config.run_name}: step {done}/{total}, loss {config.loss_fn}",
                        labels,
                    )
            if len(step_times) == 1:  # the first curve point is on screen
                self.first_point_seconds = time.time() - pressed
            self.status.value = (
                f"<b>{html.escape(config.run_name or '')}</b>{label}: step {done} of {total} · success "
                f"{metrics['sampler/success_rate']:.2f}"
                f" · time to finish ≈ {format_seconds(eta or 0)} · first point "
                f"{self.first_point_seconds:.1f} s after Run"
            )

        try:
            self.last_status = await train_until(
                trainer, config.max_steps, stop_requested=lambda: self._stop, on_step=on_step
            )
            if self._live_steps < len(trainer.history):  # stopped early: draw the last step
                await self._draw_live(
                    pd.DataFrame(trainer.history),
                    f"{config.run_name}: {self.last_status} at step {trainer.step_index}",
                    labels,
                )
            self._say(
                f"{config.run_name} {self.last_status} after {trainer.step_index} step(s); checkpoint saved in "
                f"{trainer.run_dir}."
            )
        except Exception as error:  # a failed step: say so in the widget, keep what was done
            self.last_status = "failed"
            kept = "the last checkpoint is kept"
            if trainer.consistent and not isinstance(error, TrainingDiverged):  # never save blown-up weights
                await asyncio.to_thread(trainer.save_checkpoint)
                kept = f"checkpoint saved at step {trainer.step_index}"
            self._say(f"{config.run_name} failed at step {trainer.step_index}: {error} ({kept})", error=True)
        finally:  # the status line ends with how the run ended: no time-to-finish left behind
            self.status.value = (
                f"<b>{html.escape(config.run_name or '')}</b>{label}: {self.last_status or 'ended'} after "
                f"{trainer.step_index} of"
                f" {config.max_steps} steps, in {format_seconds(time.time() - started)} (live chart: "
                f"{budget.overhead():.1%} of that time)"
            )
            await asyncio.to_thread(trainer.close)
            self.refresh()

    async def _draw_live(self, frame: pd.DataFrame, title: str, labels: dict[str, str]) -> None:
        self.live.value = await asyncio.to_thread(
            lambda: figure_png(live_figure(frame, LIVE_PANELS, title=title, labels=labels))
        )
        self.live.layout.display = None
        self.live_redraws += 1
        self._live_steps = len(frame)

    def comparison_runs(self) -> list[SavedRun]:
        """The runs chosen in the comparison picker, read from disk."""
        return [read_run(p) for p in self.run_picker.value if Path(p, METRICS_FILE).exists()]

    def _draw_comparison(self) -> None:
        runs = self.comparison_runs()
        self.comparison.value = figure_png(comparison_figure(runs))
        table = runs_table(runs)
        # cells wrap: a table of many runs and settings fits the output area instead of scrolling sideways
        css = (
            "<style>.gemlab-runs td, .gemlab-runs th {padding: 2px 8px; text-align: left; border-bottom: 1px "
            "solid #ddd}</style>"
        )
        self.table.value = (
            css + table.to_html(index=False, border=0, classes="gemlab-runs")
            if len(table)
            else "<i>No runs chosen.</i>"
        )

    def _new_watch_service(self) -> Any:
        """Tinker, or a local backend writing the watched policies' sampler weights to a temp folder."""
        if resolve_backend(self.base.backend) == "local":
            return get_service_client("local", root=tempfile.mkdtemp(prefix="gemlab-watch-"))
        return get_service_client(self.base.backend)

    async def _watch_saved(self, path: Path) -> None:
        try:
            if self._watch_service is None:
                self._watch_service = await asyncio.to_thread(self._new_watch_service)
            run = read_run(path)
            # on a loop of its own, in a thread: the kernel's loop stays free while the model loads
            episode = await asyncio.to_thread(
                asyncio.run, play_saved_policy(run, self._watch_service, seed=int(time.time()) % 10_000)
            )
            self.episode.value = episode_html(
                episode, gamma=run.config.get("gamma"), title=f"{path.name}, last checkpoint"
            ).source
        except Exception as error:  # a missing or broken checkpoint: one line in the widget
            self.episode.value = (
                f"<div style='color:#b00020'>Cannot play {html.escape(path.name)}: {html.escape(str(error))}</div>"
            )
