"""The tiny model zoo's one registry and its Hugging Face folders: the folders the emulator loads
by name are what the model code builds, and the emulator's catalogue is the registry."""

import ast
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import tinker_emulator
from gemlab import model_names
from gemlab.tiny import registry
from tinker_emulator.models import catalogue

TEXT = "<|im_start|>user\nGuess a number between 1 and 10.<|im_end|>\n<|im_start|>assistant\n<think>\\boxed{5}"


def test_the_catalogue_file_is_the_registry():
    index = json.loads(registry.INDEX_FILE.read_text())
    assert index == {
        name: {"folder": registry.folder(name).name, "description": spec.description}
        for name, spec in registry.TINY_MODELS.items()
    }, "tinker_emulator/catalogue/models.json is stale: rewrite it with python -m gemlab.tiny"
    assert catalogue() == {name: registry.folder(name) for name in registry.TINY_MODELS}


def test_the_emulators_model_names_are_in_the_zoo():
    assert {tinker_emulator.TINY, tinker_emulator.TINY_CHAT, tinker_emulator.TINY_RANDOM} <= set(registry.TINY_MODELS)


def test_each_model_name_is_written_once_in_the_code():
    """A model name has one source: across gemlab/ and tinker_emulator/, each name of the zoo and of
    ``gemlab.model_names`` is assigned to a module-level constant in one place only (the others import it)."""
    root = Path(__file__).resolve().parents[2]
    names = set(registry.TINY_MODELS) | {value for key, value in vars(model_names).items() if key.isupper()}
    where: dict[str, list[str]] = {}
    for path in sorted([*(root / "gemlab").rglob("*.py"), *(root / "tinker_emulator").rglob("*.py")]):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in names:
                where.setdefault(node.value.value, []).append(f"{path.relative_to(root)}:{node.lineno}")
    assert set(where) == names, where
    assert {name: places for name, places in where.items() if len(places) > 1} == {}


@pytest.mark.parametrize("name", list(registry.TINY_MODELS))
def test_each_folder_is_what_the_code_builds(name):
    folder = registry.folder(name)
    stored = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    built = registry.build(name)
    assert stored.state_dict().keys() == built.state_dict().keys()
    assert all(torch.equal(stored.state_dict()[key], tensor) for key, tensor in built.state_dict().items()), (
        f"{folder} differs from registry.build({name!r}): rewrite it with python -m gemlab.tiny"
    )
    tokenizer, reference = AutoTokenizer.from_pretrained(folder, local_files_only=True), registry.tokenizer(name)
    assert tokenizer.encode(TEXT) == reference.encode(TEXT)
    assert len(tokenizer) == len(reference) == stored.get_input_embeddings().weight.shape[0]
    assert tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    ) == reference.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
