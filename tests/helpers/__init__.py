"""Helpers shared by test modules (never imported from another test module):

- ``local``: prompts, datums and a run's LoRA tensors for the local-backend tests;
- ``laptop_run``: one 40-step run of the laptop preset (behind the session-wide ``laptop_run`` fixture);
- ``faults``: fault injection (SIGKILL, Ctrl-C at an exact point of a run) for the run-safety tests;
- ``scripted``: a scripted sampling client that plays fixed guesses;
- ``http_server``: a ``python -m tinker_emulator.workshop_server`` server in its own process, and clients of it;
- ``cookbook``: tinker-cookbook 0.6.1 installed on first use, and a recipe's logged metrics;
- ``gem_train``: GEM's ``tinker_train.py`` (verbatim in tests/fixtures/gem), its small flags and metrics.
"""
