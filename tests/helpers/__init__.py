"""Helpers shared by test modules (never imported from another test module):

- ``local``: prompts, datums and a run's LoRA tensors for the local-backend tests;
- ``faults``: fault injection (SIGKILL, Ctrl-C at an exact point of a run) for the run-safety tests;
- ``scripted``: a scripted sampling client that plays fixed guesses.
"""
