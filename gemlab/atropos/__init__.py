"""Nous Research's tinker-atropos design on gemlab: an Atropos environment collects through the OpenAI
endpoint's ``/generate`` and gemlab trains on what it collected (``loop.py``)."""
