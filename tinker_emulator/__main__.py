"""``python -m tinker_emulator SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``) runs a Tinker script on
the local backend."""

from tinker_emulator.runner import main

if __name__ == "__main__":
    main()
