"""The ``gemlab/tiny`` preset: a small chat model that builds offline in about a second on a CPU.

Its tokenizer is a byte-level BPE of at most 1,024 tokens (861 in practice), trained once on
GuessTheNumber text as gemlab's templates render it (``train_tokenizer`` rebuilds the shipped
``assets/tiny-tokenizer.json``). It splits words only at digit runs and newlines, so numbers are
single tokens and the game's fixed sentences become one token each: an easy prompt is 36-60
tokens. It has Qwen3's chat markers (``<|im_start|>``, ``<|im_end|>``), so the ``qwen3_*``
templates tokenize as they do for real Qwen3 models, and a byte-level alphabet, so any text can
be encoded. The model is a Llama sized by ``TINY_SHAPE``; ``build_tiny_model`` gives it random
weights from ``seed`` (``gemlab/tiny-random``) or the weights ``pretrain.py`` made
(``gemlab/tiny``); ``registry.py`` names each variant and writes it out as a Hugging Face folder. Short prompts and a
small output layer are what make an RL step take about a
second on a laptop.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from gemlab.env_ids import GUESS_EASY, GUESS_HARD, GUESS_RANDOM
from gemlab.envs import make_envs
from gemlab.templates import TEMPLATES

TOKENIZER_FILE = Path(__file__).parent / "assets" / "tiny-tokenizer.json"
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The rest of Qwen3's chat-format markers, which tinker-cookbook's Qwen3 renderers expect to be
# single tokens. ``gemlab/tiny-chat`` (what Tinker model names map to) appends them after the
# trained vocabulary (ids 861-866), so the tokenizer file, every text without them and the shipped
# weights stay as they were; ``build_tiny_model(chat_markers=True)`` gives them embedding rows at
# load time. ``gemlab/tiny`` itself keeps the trained vocabulary, so its runs stay bit-for-bit
# what they were (extra rows change the float rounding of every softmax and Adam step).
CHAT_FORMAT_TOKENS = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
VOCAB_SIZE = 1024
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Model shape of the preset; override any of these through ``build_tiny_model(**overrides)``.
TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    max_position_embeddings=2048,
)


def tokenizer_corpus() -> list[str]:
    """Text the tiny tokenizer is trained on: GuessTheNumber games (raw and as every template
    renders them through the ``concat`` wrapper), answers, and the templates themselves."""
    rng = random.Random(0)
    templates = [template for template in TEMPLATES.values() if template.renders_text]
    texts: list[str] = []
    for env_id in (GUESS_EASY, GUESS_HARD, GUESS_RANDOM):
        env = make_envs(env_id, 1, seed=0, env_wrappers="concat")[0]
        for _ in range(40):
            obs, _ = env.reset()
            done = False
            while not done:
                texts.extend(template.render_text(obs) for template in templates)
                guess = rng.randint(0, env.unwrapped.max_number + 2)
                obs, _, terminated, truncated, _ = env.step(rng.choice([f"\\boxed{{{guess}}}", str(guess)]))
                done = terminated or truncated
            texts.append(obs)
    texts.extend(f"\\boxed{{{n}}}<|im_end|>" for n in range(0, 101))
    texts.append("Think step by step. The answer is \\boxed{7}. I guess 5 because it is in the middle.")
    return texts


def train_tokenizer(path: Path = TOKENIZER_FILE) -> None:
    """Train the byte-level BPE on ``tokenizer_corpus()`` and write it to ``path``."""
    tokenizer = Tokenizer(models.BPE())
    # Split only at digit runs and newlines, so numbers stay whole tokens and frequent phrases
    # ("and the target number is higher than ") become single tokens: prompts get ~4x shorter.
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d+|\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
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


def load_tiny_tokenizer(*, chat_markers: bool = False) -> PreTrainedTokenizerFast:
    """The preset's tokenizer as a Hugging Face fast tokenizer with a chat template; with
    ``chat_markers`` also ``CHAT_FORMAT_TOKENS`` as single tokens (``gemlab/tiny-chat``)."""
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(TOKENIZER_FILE),
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if chat_markers:
        tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in CHAT_FORMAT_TOKENS])
    return tokenizer


def trained_vocab_size() -> int:
    """Tokens in the tokenizer file (the vocabulary the shipped weights were trained with)."""
    return Tokenizer.from_file(str(TOKENIZER_FILE)).get_vocab_size(with_added_tokens=True)


def add_token_rows(model: LlamaForCausalLM, vocab_size: int) -> None:
    """Grow the (tied) embedding to ``vocab_size`` rows, each new one the mean of the others: its
    logit is then far below every trained token's (about 2e-9 of the probability each, measured on
    GuessTheNumber prompts), so the model samples as before until training says otherwise."""
    # transformers' stubs make nn.Module.__getattr__'s Tensor shadow get_input_embeddings
    trained = model.get_input_embeddings().weight.detach().clone()  # type: ignore[operator]
    model.resize_token_embeddings(vocab_size, mean_resizing=False)
    with torch.no_grad():
        model.get_input_embeddings().weight[len(trained) :] = trained.mean(0)  # type: ignore[operator]


def load_pretrained(model: LlamaForCausalLM, path: Path) -> LlamaForCausalLM:
    """Load pretrained weights (a ``model.safetensors`` of the trained vocabulary) into a freshly
    built tiny model (the output layer is tied to the embedding, so the file leaves it out)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; rebuild it with: python -m gemlab.tiny.pretrain")
    missing, unexpected = model.load_state_dict(load_file(str(path)), strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{path} does not fit the tiny model (missing {missing}, unexpected {unexpected})")
    model.tie_weights()
    return model


def build_tiny_model(
    seed: int = 0, *, weights: Path | None = None, chat_markers: bool = False, **overrides: int
) -> LlamaForCausalLM:
    """A Llama sized by ``TINY_SHAPE``, randomly initialised from ``seed`` (same seed, same
    weights), or loaded from ``weights`` (a pretrained base's ``model.safetensors``, see
    ``registry.weights_file``); with ``chat_markers`` it has rows for ``CHAT_FORMAT_TOKENS`` too."""
    tokenizer = load_tiny_tokenizer(chat_markers=chat_markers)
    config = LlamaConfig(
        vocab_size=trained_vocab_size(),
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **{**TINY_SHAPE, **overrides},
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    if weights is not None:
        load_pretrained(model, weights)
    if chat_markers:
        add_token_rows(model, len(tokenizer))
    return model


if __name__ == "__main__":
    train_tokenizer()
    print(f"wrote {TOKENIZER_FILE} ({len(load_tiny_tokenizer())} tokens)")
