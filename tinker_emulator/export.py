"""Write a local model out as a Hugging Face folder (weights, config, tokenizer, chat template).

```bash
python -m tinker_emulator.export gemlab/tiny ./tiny-hf
GEMLAB_LOCAL_MODEL=gemlab/tiny-chat python -m tinker_emulator.export Qwen/Qwen3-4B-Instruct-2507 ./qwen-local   # the
stand-in
```

The folder loads anywhere without a network: ``AutoTokenizer.from_pretrained("./tiny-hf")``,
``AutoModelForCausalLM.from_pretrained("./tiny-hf")``, and as a model name for the local backend
(``base_model="./tiny-hf"``), for code that needs a path rather than a Tinker model name.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tinker_emulator.models import UnknownModelError, build_model, load_tokenizer, resolve_model_name


def export(name: str, folder: str | Path) -> Path:
    """Save local model ``name`` (or the stand-in a Tinker name runs on) and its tokenizer to ``folder``."""
    target = Path(folder).expanduser()
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} is not empty; choose a new folder")
    local = resolve_model_name(name)
    model, tokenizer = build_model(local), load_tokenizer(local)  # a fresh copy: no LoRA layers in it
    target.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description="Write a local model out as a Hugging Face folder.")
    parser.add_argument(
        "model", help="a local preset (gemlab/tiny, ...), a folder, or a Tinker model name with $GEMLAB_LOCAL_MODEL set"
    )
    parser.add_argument("folder", help="where to write it (new or empty)")
    args = parser.parse_args()
    try:
        target = export(args.model, args.folder)
    except (UnknownModelError, FileExistsError, FileNotFoundError, ModuleNotFoundError) as exc:
        raise SystemExit(f"tinker_emulator.export: {exc}") from None
    print(f"wrote {resolve_model_name(args.model)} to {target}")


if __name__ == "__main__":
    main()
