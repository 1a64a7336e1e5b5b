"""Tiny random-weight models that a real vLLM can serve, generated on the spot.

No model hub is reachable here, and a test tier that downloads weights would
be slow and flaky anyway. These models answer with random tokens, which is
all a health canary needs: a reply arrives, a grammar constrains it, an image
shows up in the prompt token count.

- ``text``: a Llama (hidden 128, 2 heads of 64, 1 KV head, 2 layers) with a
  byte-level BPE tokenizer trained here and a minimal chat template.
  vLLM's CPU attention rejects a head size of 16, so heads are 64 wide.
- ``vision``: a PaliGemma (SigLIP 64 wide, 32x32 images in patches of 8, so 16
  image tokens; Gemma 128 wide) that serves text, structured and image
  requests. vLLM's PaliGemma processor looks up the token ``"\\n"``, and its
  loader expects the vision weights under ``vision_tower.vision_model.*``
  without the unused ``vision_tower.head.*``; both are arranged here.

- a base model, :func:`without_chat_template` (``python models.py base
  MODEL_DIR``): a copy of a generated model, its files hard-linked, whose
  tokenizer defines no chat template, so vLLM answers every chat request with
  HTTP 400 while completions work. Named ``<model>-nochat`` beside the model,
  whose own name carries this file's hash, so a change here never reuses a
  copy made by older code.

This file runs inside the engine environment (torch, transformers,
tokenizers, safetensors) as a script: ``python models.py KIND OUT_DIR``. It
imports nothing from the sentinel tree, so it works without the project
installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch  # type: ignore[import-not-found]
from safetensors.torch import load_file, save_file  # type: ignore[import-not-found]
from tokenizers import (  # type: ignore[import-not-found]
    AddedToken,
    Tokenizer,
    decoders,
    models,
    pre_tokenizers,
    trainers,
)
from transformers import (  # type: ignore[import-not-found]
    GemmaConfig,
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    PaliGemmaProcessor,
    PreTrainedTokenizerFast,
    SiglipImageProcessor,
    SiglipVisionConfig,
)

HIDDEN = 128
HEADS = 2
KV_HEADS = 1
HEAD_DIM = 64
LAYERS = 2
INTERMEDIATE = 256
BPE_VOCAB = 512
MAX_LEN = 2048
IMAGE_SIZE = 32
PATCH = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH) ** 2

BOS, EOS, PAD, UNK = "<bos>", "<eos>", "<pad>", "<unk>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
IMAGE_TOKEN = "<image>"

# Renders plain-string and OpenAI content-part messages alike (text parts only:
# PaliGemma's processor inserts the image tokens itself, ahead of the prompt).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ eos_token }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

_CORPUS = (
    "The quick brown fox jumps over the lazy dog. Health checks answer one question: "
    "is the server still producing tokens? A canary is a tiny real request. "
    'Reply with JSON: {"status": "ok", "value": 42, "items": [1, 2, 3], "ok": true} '
    "Describe the image. What colour is the square? It is red, green or blue. "
    "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ "
    "ok-7f3a9c nonce-1234 hello world, how are you today? I am fine, thank you.\n"
)


def _train_tokenizer(extra_special: tuple[str, ...]) -> Any:
    """A byte-level BPE tokenizer with bos/eos/pad/unk, chat markers and ``"\\n"``."""

    tokenizer = Tokenizer(models.BPE(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    special = [BOS, EOS, PAD, UNK, *ROLE_TOKENS, *extra_special]
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    # vLLM's PaliGemma processor looks the newline up by its literal text.
    tokenizer.add_tokens([AddedToken("\n", normalized=False, special=False)])
    return tokenizer


def _fast_tokenizer(extra_special: tuple[str, ...]) -> Any:

    fast = PreTrainedTokenizerFast(
        tokenizer_object=_train_tokenizer(extra_special),
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        model_max_length=MAX_LEN,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _round_up(n: int, multiple: int = 64) -> int:
    return (n + multiple - 1) // multiple * multiple


def build_text(out: Path) -> None:

    torch.manual_seed(0)
    tokenizer = _fast_tokenizer(())
    config = LlamaConfig(
        vocab_size=_round_up(len(tokenizer)),
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_LEN,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def build_vision(out: Path) -> None:

    torch.manual_seed(0)
    tokenizer = _fast_tokenizer((IMAGE_TOKEN,))
    image_processor = SiglipImageProcessor(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    image_processor.image_seq_length = IMAGE_TOKENS  # read by PaliGemmaProcessor
    processor = PaliGemmaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE
    )
    tokenizer = processor.tokenizer  # the processor adds its location and segment tokens
    vocab_size = _round_up(len(tokenizer))
    vision = SiglipVisionConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=1,
        image_size=IMAGE_SIZE,
        patch_size=PATCH,
        projection_dim=HIDDEN,
    )
    text = GemmaConfig(
        vocab_size=vocab_size,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_LEN,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    config = PaliGemmaConfig(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
        vocab_size=vocab_size,
        projection_dim=HIDDEN,
        hidden_size=HIDDEN,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = PaliGemmaForConditionalGeneration(config).to(torch.float32)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model.save_pretrained(out)
    processor.save_pretrained(out)
    _rename_vision_weights(out)


def _rename_vision_weights(out: Path) -> None:
    """Store the SigLIP weights where vLLM's PaliGemma loader looks for them."""
    renamed = 0
    for shard in sorted(out.glob("*.safetensors")):
        tensors = load_file(str(shard))
        fixed: dict[str, Any] = {}
        for name, tensor in tensors.items():
            if name.startswith("vision_tower.head."):
                continue
            if name.startswith("vision_tower.") and not name.startswith(
                "vision_tower.vision_model."
            ):
                name = "vision_tower.vision_model." + name.removeprefix("vision_tower.")
                renamed += 1
            fixed[name] = tensor.contiguous()
        save_file(fixed, str(shard), metadata={"format": "pt"})
    index = out / "model.safetensors.index.json"
    if index.exists():  # tiny models are one shard; an index would name old keys
        index.unlink()
    if renamed == 0:
        raise RuntimeError("no vision_tower weights found to rename")


BUILDERS = {"text": build_text, "vision": build_vision}
BASE = "base"  # the command that copies a model without its chat template
NO_TEMPLATE_SUFFIX = "-nochat"
# Where transformers keeps a chat template besides tokenizer_config.json.
TEMPLATE_FILES = frozenset({"chat_template.jinja", "chat_template.json"})


def without_chat_template(model: Path) -> Path:
    """``model`` as a base model: the same weights and tokenizer, no chat template.

    A sibling folder, built once and atomically (staged, then renamed into
    place; a racing builder's copy is as good as this one).
    """
    out = model.with_name(model.name + NO_TEMPLATE_SUFFIX)
    if (out / "config.json").exists():
        return out
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=model.parent))
    try:
        rewritten = {"tokenizer_config.json", "sentinel-model.json"}
        for item in model.iterdir():
            if item.is_file() and item.name not in TEMPLATE_FILES | rewritten:
                os.link(item, staging / item.name)
        tokenizer = json.loads((model / "tokenizer_config.json").read_text())
        tokenizer.pop("chat_template", None)
        (staging / "tokenizer_config.json").write_text(json.dumps(tokenizer, indent=2) + "\n")
        built = json.loads((model / "sentinel-model.json").read_text())
        built["chat_template"] = False
        (staging / "sentinel-model.json").write_text(json.dumps(built) + "\n")
        with contextlib.suppress(OSError):  # another builder got there first
            os.rename(staging, out)
        if not (out / "config.json").exists():
            raise RuntimeError(f"could not make {out}")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def build(kind: str, out: Path) -> Path:
    """Build one model into ``out`` atomically (a temp dir renamed into place)."""
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        BUILDERS[kind](tmp)
        (tmp / "sentinel-model.json").write_text(json.dumps({"kind": kind}) + "\n")
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("kind", choices=[*sorted(BUILDERS), BASE])
    parser.add_argument("out", type=Path, help=f"the model folder (for {BASE}: the model to copy)")
    args = parser.parse_args(argv)
    if args.kind == BASE:
        print(without_chat_template(args.out))
        return 0
    build(args.kind, args.out)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
