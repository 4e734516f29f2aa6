"""``python -m gemlab``: gemlab's commands, one line each (standard library only, so it answers at once)."""

from __future__ import annotations

import sys

#: (how to run it, what it does); each command's ``--help`` says the rest.
COMMANDS: list[tuple[str, str]] = [
    (
        "python -m gemlab.train [preset=laptop] [key=value ...]",
        "train GEM's REINFORCE + ReBN loop (preset=laptop trains here in minutes; no preset: GEM's setup on Tinker)",
    ),
    ("python -m gemlab.doctor", "pre-flight check of this machine: the install, memory, and each notebook's time here"),
    (
        "python -m gemlab.openai_endpoint --model MODEL",
        "serve a base model or saved weights through an OpenAI-compatible API",
    ),
    (
        "python research/experiments/reproduce_gem.py",
        "the GEM paper's studies at laptop scale (gemlab.studies; notebook 08)",
    ),
    ("python -m gemlab.atropos [key=value ...]", "train on Atropos environments' batches, serving the weights to them"),
    ("python -m gemlab.cookbook key=value ...", "tinker-cookbook's RL training on a GEM env"),
    ("python -m gemlab.tiny [NAME ...]", "rewrite the tiny model zoo's Hugging Face folders"),
]


def main() -> int:
    """Print the commands (whatever the arguments); returns 0."""
    print("gemlab's commands (each takes --help):")
    for command, what in COMMANDS:
        print(f"  {command:<56} {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
