# LAB FIXTURE STAND-IN -- written for the gpufleet.llm test lab, not Moonshot AI's code.
#
# The real repository loads a tiktoken BPE file ("tiktoken.model": one "<base64 token> <rank>" line
# per token). The fixture's tiktoken.model has the same line format but only a handful of entries;
# this reader exists so tokenizer_config.json's auto_map points at a real, importable module.
"""Tokenizer stand-in for the Kimi-K2.6-mini lab fixture."""

import base64


def load_ranks(path):
    ranks = {}
    with open(path, "rb") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


class TikTokenTokenizer:
    vocab_files_names = {"vocab_file": "tiktoken.model"}

    def __init__(self, vocab_file, **kwargs):
        self.ranks = load_ranks(vocab_file)
        self.init_kwargs = kwargs

    def __len__(self):
        return len(self.ranks)
