"""``python -m gemlab.tiny [NAME ...]``: rewrite the tiny model zoo's Hugging Face folders."""

from gemlab.tiny.registry import main

if __name__ == "__main__":
    main()
