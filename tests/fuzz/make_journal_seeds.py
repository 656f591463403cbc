#!/usr/bin/env python3
"""Adds the seeds of the journal fuzz target to its corpus
(tests/fuzz/corpus/journal.tar.gz): journals as ckpt's writers write them (a
sharded replacement, DCP, gguf-split parts, a journal with nothing to do)
and the planted ones of issue 26 (stage "..", ".", a user's file, paths,
a truncated journal).  No dependencies: python3 tests/fuzz/make_journal_seeds.py"""
import seeds

STAGE = "..commit.ckpt-tmp-31337-d0"


def journal(stage, *entries, end=True):
    fields = ["ckpt-commit-1", "stage", stage, *entries] + (["end"] if end else [])
    return b"".join(f.encode() + b"\0" for f in fields)


def put(data):
    seeds.put("journal", data)


shards = [f"model-{i:05d}-of-00003.safetensors" for i in range(1, 4)]
put(journal(STAGE, "remove", "model.safetensors.index.json", "remove", "model-00001-of-00002.safetensors",
            "remove", "model-00002-of-00002.safetensors",
            *[x for s in shards for x in ("publish", s)], "publish", "model.safetensors.index.json"))
put(journal(STAGE, "remove", "model.safetensors", *[x for s in shards for x in ("publish", s)]))
put(journal("..commit.ckpt-tmp-7-d12", "remove", ".metadata", "publish", "__0_0.distcp", "publish", "__1_0.distcp",
            "publish", ".metadata"))
put(journal("..commit.ckpt-tmp-4194304-d4294967295", "publish", "llama-00001-of-00002.gguf", "publish",
            "llama-00002-of-00002.gguf"))
put(journal(STAGE))
# Planted or damaged.
put(journal("..", "remove", "precious.txt"))
put(journal(".", "remove", "model.safetensors"))
put(journal(STAGE, "remove", "notes.txt"))
put(journal(STAGE, "remove", "/home/user/model.safetensors"))
put(journal(STAGE, "publish", "../model.safetensors"))
put(journal(STAGE, "publish", "model.safetensors", "remove", "x.safetensors"))
put(journal(STAGE, "publish", "model.safetensors", end=False))
put(journal(STAGE, "publish", "model.safetensors")[:-1])
put(journal(".model.ckpt-tmp-12-d1", "publish", "model.safetensors"))
put(journal(STAGE, "delete", "model.safetensors"))
put(journal(STAGE) + b"trailing")
seeds.commit()
