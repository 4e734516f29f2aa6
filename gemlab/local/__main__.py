"""``python -m gemlab.local SCRIPT [ARGS...]`` (or ``-m MODULE [ARGS...]``) runs a Tinker script on
the local backend."""

from gemlab.local.runner import main

if __name__ == "__main__":
    main()
