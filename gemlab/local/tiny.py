"""The ``gemlab/tiny`` preset: a small chat model that builds offline in about a second on a CPU.

Its tokenizer is a byte-level BPE with a 1,024-token vocabulary, trained once on the text of
GEM's games and gemlab's prompt templates (``train_tokenizer`` rebuilds the shipped
``assets/tiny-tokenizer.json``). It has Qwen3's chat markers (``<|im_start|>``, ``<|im_end|>``),
so the ``qwen3_*`` templates tokenize as they do for real Qwen3 models, and a byte-level
alphabet, so any text can be encoded. The model is a randomly initialised Llama whose weights
depend only on ``seed``; a small vocabulary keeps the output layer cheap, which is what makes RL
steps take seconds on a laptop.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TOKENIZER_FILE = Path(__file__).parent / "assets" / "tiny-tokenizer.json"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 1024
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Model shape of the preset; override any of these through ``build_tiny_model(**overrides)``.
TINY_SHAPE = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=2048,
)


def tokenizer_corpus() -> list[str]:
    """Text the tiny tokenizer is trained on: GEM game instructions, feedback and templates."""
    import gem

    from gemlab.templates import TEMPLATES

    texts: list[str] = []
    for env_id in ("game:GuessTheNumber-v0-easy", "game:GuessTheNumber-v0-hard"):
        env = gem.make(env_id, seed=0, use_mp=False)
        for _ in range(20):
            obs, _ = env.reset()
            texts.append(obs)
            for guess in range(0, 60, 3):
                obs, _, terminated, truncated, _ = env.step(f"\\boxed{{{guess}}}")
                texts.append(obs)
                if terminated or truncated:
                    break
    for n in range(0, 101):
        texts.append(f"\\boxed{{{n}}} At turn {n % 10}, you guessed {n}.")
    for template in TEMPLATES.values():
        if template.renders_text:
            texts.append(template.render_text("Observation"))
    texts.append("Think step by step. The answer is \\boxed{7}. I guess 5 because it is in the middle.")
    return texts


def train_tokenizer(path: Path = TOKENIZER_FILE) -> None:
    """Train the byte-level BPE on ``tokenizer_corpus()`` and write it to ``path``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(tokenizer_corpus(), trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(json.loads(tokenizer.to_str()), indent=None))


def load_tiny_tokenizer() -> PreTrainedTokenizerFast:
    """The preset's tokenizer as a Hugging Face fast tokenizer with a chat template."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(TOKENIZER_FILE),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_tiny_model(seed: int = 0, **overrides: int) -> LlamaForCausalLM:
    """A randomly initialised Llama sized by ``TINY_SHAPE``; same ``seed``, same weights."""
    tokenizer = load_tiny_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**TINY_SHAPE, **overrides},
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def save_tiny(folder: str | Path, seed: int = 0) -> Path:
    """Write the preset as an ordinary Hugging Face folder (``from_pretrained`` loads it offline)."""
    folder = Path(folder)
    build_tiny_model(seed).save_pretrained(folder)
    load_tiny_tokenizer().save_pretrained(folder)
    return folder


if __name__ == "__main__":
    train_tokenizer()
    print(f"wrote {TOKENIZER_FILE} ({len(load_tiny_tokenizer())} tokens)")
