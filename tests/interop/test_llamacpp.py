"""Hugging Face → llama.cpp GGUF against llama.cpp's own convert_hf_to_gguf.py
(the llama-cpp-python sdist's vendored llama.cpp, which `make test` unpacks
into .cache/ and names in CKPT_LLAMA_CPP): ckpt's file is the script's, byte
for byte, and bad model directories are refused by file and key with nothing
written."""
import atexit
import hashlib
import json
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from ckptlib import BIN_PATH
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parents[2]
LLAMA_CPP = Path(os.environ.get("CKPT_LLAMA_CPP", REPO / ".cache/llama-cpp-python-0.3.36/llama.cpp"))
SCRIPT = LLAMA_CPP / "convert_hf_to_gguf.py"
OUTTYPES = ["f32", "f16", "bf16", "q8_0", "auto"]

# Llama 3's pre-tokenizer: the script knows its tokens of a fixed text as
# "llama-bpe" (with Llama 3's vocabulary, which models/ggml-vocab-llama-bpe.gguf holds).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen2's ("qwen2", with Qwen2's vocabulary: models/ggml-vocab-qwen2.gguf).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")


def ckpt(*args):
    return subprocess.run([BIN_PATH, *map(str, args)], capture_output=True, text=True)


def tokenizer(family, out):
    """tokenizer.json and tokenizer_config.json of a family's real tokenizer
    (vocabulary, merges and special tokens from the vendored vocab file),
    built once beside the unpacked script (~20 s) and copied into `out`."""
    kept = LLAMA_CPP.parent / f"{family}-tokenizer"
    if not kept.is_dir():
        tmp = kept.with_name(f"{kept.name}.{os.getpid()}.tmp")
        tmp.mkdir()
        TOKENIZERS[family](tmp)
        try:
            os.rename(tmp, kept)
        except OSError:  # another run kept it first
            pass
    for f in TOKENIZER_FILES.get(family, ("tokenizer.json", "tokenizer_config.json")):
        (out / f).write_bytes((kept / f).read_bytes())


def vocab_file(name):
    """A vendored vocab file's tokens, token types, merges (a SentencePiece
    vocabulary's: None) and chat template."""
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        r = gguf.GGUFReader(LLAMA_CPP / "models" / name)
        template, merges = r.fields.get("tokenizer.chat_template"), r.fields.get("tokenizer.ggml.merges")
        return (r.fields["tokenizer.ggml.tokens"].contents(), r.fields["tokenizer.ggml.token_type"].contents(),
                [tuple(m.split(" ")) for m in merges.contents()] if merges else None,
                template.contents() if template else None)
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))


def build_llama3_tokenizer(out):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    tokens, types, merges, _ = vocab_file("ggml-vocab-llama-bpe.gguf")
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == 1}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in range(128000, 128256)])
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", 128000)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>", "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 131072, "clean_up_tokenization_spaces": True,
        "chat_template": "{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
                         "{{ m['content'] }}<|eot_id|>{% endfor %}"}, indent=2))


def build_qwen2_tokenizer(out):
    """Qwen2's: NFC, Qwen2's Split expression, a ByteLevel post-processor, no BOS."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    tokens, types, merges, template = vocab_file("ggml-vocab-qwen2.gguf")
    vocab = {t: i for i, t in enumerate(tokens) if types[i] == 1}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), "isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i in range(151643, 151646)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "add_prefix_space": False, "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "errors": "replace", "model_max_length": 131072, "split_special_tokens": False, "unk_token": None,
        "tokenizer_class": "Qwen2Tokenizer", "chat_template": template}, indent=2))


def sentencepiece_model(name, out):
    """tokenizer.model of a vendored SentencePiece vocab file (Llama 2's
    BPE with byte fallback: its pieces, scores and types), as
    sentencepiece_model.proto spells it; checked by SentencePieceProcessor."""
    from sentencepiece import SentencePieceProcessor
    from sentencepiece import sentencepiece_model_pb2 as pb
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        r = gguf.GGUFReader(LLAMA_CPP / "models" / name)
        fields = [r.fields[f"tokenizer.ggml.{k}"].contents() for k in ("tokens", "scores", "token_type")]
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))
    m = pb.ModelProto()
    for text, score, kind in zip(*fields):
        if kind in (3, 4) and len(m.pieces) >= 32000:
            break  # added tokens: tokenizer_config.json's, not the model's
        piece = m.pieces.add()
        piece.piece, piece.score, piece.type = text, score, {4: 1}.get(kind, kind)
    spec = m.trainer_spec
    spec.model_type, spec.vocab_size, spec.byte_fallback = 2, len(m.pieces), True
    spec.unk_id, spec.bos_id, spec.eos_id, spec.pad_id = 0, 1, 2, -1
    norm = m.normalizer_spec
    norm.name, norm.add_dummy_prefix, norm.remove_extra_whitespaces, norm.escape_whitespaces = "identity", True, False, True
    (out / "tokenizer.model").write_bytes(m.SerializeToString())
    sp = SentencePieceProcessor()
    sp.LoadFromFile(str(out / "tokenizer.model"))
    assert sp.encode("Hello world") == [15043, 3186]


def build_llama2_tokenizer(out):
    """Llama 2's: tokenizer.model, the tokenizer.json transformers makes of
    it (a BOS template), and Llama-2-chat's tokenizer_config.json."""
    from transformers import LlamaTokenizer
    sentencepiece_model("ggml-vocab-llama-spm.gguf", out)
    tok = LlamaTokenizer.from_pretrained(str(out), add_bos_token=True, add_eos_token=False)
    assert len(tok) == 32000 and tok("Hello world").input_ids == [1, 15043, 3186]
    tok.save_pretrained(str(out / "hf"))
    os.replace(out / "hf" / "tokenizer.json", out / "tokenizer.json")
    special = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": True, "add_eos_token": False,
        "added_tokens_decoder": {str(i): {"content": t, **special} for i, t in enumerate(["<unk>", "<s>", "</s>"])},
        "bos_token": "<s>", "clean_up_tokenization_spaces": False, "eos_token": "</s>", "legacy": False,
        "model_max_length": 1000000000000000019884624838656, "pad_token": None, "padding_side": "right",
        "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False,
        "chat_template": "{% for m in messages %}{% if m['role'] == 'user' %}{{ bos_token + '[INST] ' + m['content'] "
                         "+ ' [/INST]' }}{% else %}{{ ' ' + m['content'] + ' ' + eos_token }}{% endif %}{% endfor %}"},
        indent=2))


def build_phi3_tokenizer(out):
    """Phi-3's: Llama 2's tokenizer.model, its chat tokens added after
    (tokenizer.json and tokenizer_config.json; </s> not special there),
    Phi-3-mini's tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer
    build_llama2_tokenizer(out)
    tokens, types, _, template = vocab_file("ggml-vocab-phi-3.gguf")
    added = {i: tokens[i] for i in range(32000, len(tokens)) if types[i] == 3}
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False, rstrip=True) for t in added.values()])
    assert [tok.token_to_id(t) for t in added.values()] == list(added)
    tok.save(str(out / "tokenizer.json"))
    entry = {"lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
    decoder = {"0": {"content": "<unk>", **entry}, "1": {"content": "<s>", **entry},
               "2": {"content": "</s>", **entry, "rstrip": True, "special": False}}
    decoder |= {str(i): {"content": t, **entry, "rstrip": True} for i, t in added.items()}
    (out / "tokenizer_config.json").write_text(json.dumps({
        "add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder, "bos_token": "<s>",
        "chat_template": template, "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>",
        "legacy": False, "model_max_length": 4096, "pad_token": "<|endoftext|>", "padding_side": "left",
        "sp_model_kwargs": {}, "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>",
        "use_default_system_prompt": False}, indent=2))


TOKENIZERS = {"llama3": build_llama3_tokenizer, "qwen2": build_qwen2_tokenizer, "llama2": build_llama2_tokenizer,
              "phi3": build_phi3_tokenizer}
# The files each family's tokenizer is made of.
SPM_FILES = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json")
TOKENIZER_FILES = {"llama2": SPM_FILES, "phi3": SPM_FILES}
for _f in ("mixtral", "gemma2", "gemma3"):
    TOKENIZER_FILES[_f] = SPM_FILES
# Families that ship another family's tokenizer.
TOKENIZER_OF = {"qwen3": "qwen2", "qwen2moe": "qwen2", "qwen3moe": "qwen2", "mixtral": "llama2", "gemma2": "llama2",
                "gemma3": "llama2"}


def write_decoder(out, config, dtype, seed, bias, qk_norm=False):
    """config.json and a random model.safetensors of a Llama-style decoder
    of that config (lm_head unless the embeddings are tied; Q/K/V biases
    with `bias`; Q and K norms of a head with `qk_norm`), drawn in a fixed
    order from a seeded generator."""
    hidden, ff, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    sd = {"model.embed_tokens.weight": w(vocab, hidden)}
    if not config["tie_word_embeddings"]:
        sd["lm_head.weight"] = w(vocab, hidden)
    sd["model.norm.weight"] = w(hidden)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}.self_attn."
        sd |= {f"model.layers.{i}.input_layernorm.weight": w(hidden),
               f"model.layers.{i}.post_attention_layernorm.weight": w(hidden)}
        for proj, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
            sd[p + f"{proj}_proj.weight"] = w(rows, hidden)
            if bias:
                sd[p + f"{proj}_proj.bias"] = w(rows)
        if qk_norm:
            sd |= {p + "q_norm.weight": w(head_dim), p + "k_norm.weight": w(head_dim)}
        p = f"model.layers.{i}."
        sd |= {p + "self_attn.o_proj.weight": w(hidden, heads * head_dim), p + "mlp.gate_proj.weight": w(ff, hidden),
               p + "mlp.up_proj.weight": w(ff, hidden), p + "mlp.down_proj.weight": w(hidden, ff)}
    out.mkdir(parents=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


def tiny_qwen2(out, dtype=torch.bfloat16, seed=2):
    """A random Qwen2 of 2 layers and hidden size 32 (4 heads of 8, 2 KV
    heads), biases on Q, K and V, the embeddings tied (no lm_head)."""
    hidden, ff, layers, heads, kv_heads, head_dim, vocab = 32, 64, 2, 4, 2, 8, 151936
    config = {
        "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "dtype": "bfloat16",
        "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02,
        "intermediate_size": ff, "layer_types": ["full_attention"] * layers, "max_position_embeddings": 32768,
        "max_window_layers": layers, "model_type": "qwen2", "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "sliding_window": None,
        "tie_word_embeddings": True, "use_cache": True, "use_sliding_window": False, "vocab_size": vocab}
    write_decoder(out, config, dtype, seed, bias=True)


def tiny_qwen3(out, dtype=torch.bfloat16, seed=3, **config_changes):
    """A random Qwen3 of 2 layers and hidden size 32 (4 heads of 16, wider
    than hidden_size / heads, 2 KV heads), Q and K norms, no biases, the
    embeddings tied."""
    hidden, ff, layers, heads, kv_heads, head_dim, vocab = 32, 64, 2, 4, 2, 16, 151936
    config = {
        "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 151643, "dtype": "bfloat16", "eos_token_id": 151645, "head_dim": head_dim,
        "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": ff,
        "layer_types": ["full_attention"] * layers, "max_position_embeddings": 40960, "max_window_layers": layers,
        "model_type": "qwen3", "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"}, "sliding_window": None,
        "tie_word_embeddings": True, "use_cache": True, "use_sliding_window": False, "vocab_size": vocab}
    config |= config_changes
    write_decoder(out, config, dtype, seed, bias=False, qk_norm=True)


def tiny_llama(out, dtype=torch.bfloat16, seed=0, **config_changes):
    """A random Llama 3 of 2 layers and hidden size 32 (4 heads of 8, 2 KV
    heads), as save_pretrained writes it: config.json and model.safetensors."""
    hidden, ff, layers, heads, kv_heads, head_dim, vocab = 32, 64, 2, 4, 2, 8, 128256
    config = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 128000, "dtype": "bfloat16", "eos_token_id": 128001, "head_dim": head_dim,
        "hidden_act": "silu", "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": ff,
        "max_position_embeddings": 8192, "mlp_bias": False, "model_type": "llama", "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": kv_heads, "pad_token_id": None, "pretraining_tp": 1,
        "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "transformers_version": "5.23.0", "use_cache": True, "vocab_size": vocab}
    config |= config_changes
    write_decoder(out, config, dtype, seed, bias=False)


def tiny_llama2(out, dtype=torch.float16, seed=4, **config_changes):
    """A random Llama 2 of 2 layers and hidden size 32 (4 heads of 8, as
    many KV heads), f16 weights, with Llama 2's SentencePiece tokenizer;
    config.json as transformers 5 writes Llama 2's (rope_parameters and
    head_dim filled in: the script reads the config through AutoConfig)."""
    hidden, ff, layers, heads, vocab = 32, 64, 2, 4, 32000
    config = {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "dtype": "float16", "eos_token_id": 2, "head_dim": hidden // heads, "hidden_act": "silu",
        "hidden_size": hidden, "initializer_range": 0.02, "intermediate_size": ff, "max_position_embeddings": 4096,
        "mlp_bias": False, "model_type": "llama", "num_attention_heads": heads, "num_hidden_layers": layers,
        "num_key_value_heads": heads, "pad_token_id": None, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "tie_word_embeddings": False,
        "transformers_version": "5.23.0", "use_cache": True, "vocab_size": vocab}
    config |= config_changes
    write_decoder(out, config, dtype, seed, bias=False)


def tiny_phi3(out, dtype=torch.bfloat16, seed=6, **config_changes):
    """A random Phi-3-mini of 2 layers and hidden size 32 (4 heads of 8, as
    many KV heads): Q, K and V fused, gate and up fused; config.json as
    transformers 5 writes Phi-3-mini-4k's."""
    hidden, ff, layers, heads, vocab = 32, 64, 2, 4, 32064
    config = {
        "architectures": ["Phi3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
        "dtype": "bfloat16", "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": ff, "max_position_embeddings": 4096, "model_type": "phi3",
        "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": heads,
        "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
        "rope_parameters": {"partial_rotary_factor": 1.0, "rope_theta": 10000.0, "rope_type": "default"},
        "sliding_window": 2047, "tie_word_embeddings": False, "transformers_version": "5.23.0", "use_cache": True,
        "vocab_size": vocab}
    config |= config_changes
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    sd = {"model.embed_tokens.weight": w(vocab, hidden), "lm_head.weight": w(vocab, hidden), "model.norm.weight": w(hidden)}
    for i in range(layers):
        p = f"model.layers.{i}."
        sd |= {p + "input_layernorm.weight": w(hidden), p + "post_attention_layernorm.weight": w(hidden),
               p + "self_attn.qkv_proj.weight": w(3 * hidden, hidden), p + "self_attn.o_proj.weight": w(hidden, hidden),
               p + "mlp.gate_up_proj.weight": w(2 * ff, hidden), p + "mlp.down_proj.weight": w(hidden, ff)}
    out.mkdir(parents=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


def reference(model, outtype):
    """llama.cpp's conversion, with the venv's Python (a convert_worker.py
    process: the script's main() as `python convert_hf_to_gguf.py MODEL
    --outfile F --outtype T` runs it): kept beside the unpacked script under
    the digest of the model's files (the models are seeded, so reruns take
    the kept file; ~4 s a conversion otherwise)."""
    digest = hashlib.sha256(outtype.encode())
    for f in sorted(model.iterdir()):
        digest.update(f.name.encode() + b"\0" + f.read_bytes())
    dst = LLAMA_CPP.parent / "references" / f"{model.name}-{digest.hexdigest()[:24]}.gguf"
    if dst.is_file():
        return dst
    dst.parent.mkdir(exist_ok=True)
    tmp = dst.with_suffix(f".{os.getpid()}.tmp")
    answer = SCRIPT_WORKERS.run({"model": str(model), "outfile": str(tmp), "outtype": outtype})
    assert answer["ok"], answer["error"]
    os.replace(tmp, dst)
    return dst


class ScriptWorkers:
    """Up to `size` convert_worker.py processes, each the script imported
    once, started as jobs come and ended when the tests' process exits."""

    def __init__(self, size):
        self.size, self.started, self.idle = size, [], []
        self.changed = threading.Condition()

    def run(self, job):
        worker = self.take()
        worker.stdin.write(json.dumps(job) + "\n")
        worker.stdin.flush()
        line = worker.stdout.readline()
        answer = json.loads(line) if line else {"ok": False, "error": f"the worker ended ({worker.wait()})"}
        if answer["ok"]:
            self.give_back(worker)
        else:  # it has ended (or is ending): a fresh one takes its place
            self.close(worker)
        return answer

    def take(self):
        with self.changed:
            while not self.idle and len(self.started) == self.size:
                self.changed.wait()
            if self.idle:
                return self.idle.pop()
            w = subprocess.Popen([sys.executable, Path(__file__).with_name("convert_worker.py"), SCRIPT],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.started.append(w)
            return w

    def give_back(self, worker):
        with self.changed:
            self.idle.append(worker)
            self.changed.notify()

    def close(self, worker):
        worker.stdin.close()
        worker.wait()
        with self.changed:
            self.started.remove(worker)
            if worker in self.idle:
                self.idle.remove(worker)
            self.changed.notify()

    def close_all(self):
        for w in list(self.started):
            self.close(w)


# Two: the CI machine's cores.
SCRIPT_WORKERS = ScriptWorkers(2)
atexit.register(SCRIPT_WORKERS.close_all)


def assert_the_scripts_file(model, outtype, tmp_path):
    """ckpt's conversion of `model` is the script's, byte for byte."""
    ref = reference(model, outtype)
    dst = tmp_path / "model.gguf"
    r = ckpt("convert", model, dst, *([] if outtype == "auto" else ["--dtype", outtype]), "-q")
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes() == ref.read_bytes()


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Each family's model directory and the script's file for each outtype."""
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: `make llama-cpp-ref` unpacks llama.cpp's conversion"
    root = tmp_path_factory.mktemp("llamacpp")
    dirs = {"llama3": root / "tiny-llama3", "qwen2": root / "tiny-qwen2", "qwen3": root / "tiny-qwen3",
            "llama2": root / "tiny-llama2", "phi3": root / "tiny-phi3", "mixtral": root / "tiny-mixtral",
            "qwen2moe": root / "tiny-qwen2moe", "qwen3moe": root / "tiny-qwen3moe", "gemma2": root / "tiny-gemma2",
            "gemma3": root / "tiny-gemma3"}
    tiny_mixtral(dirs["mixtral"])
    tiny_qwen_moe(dirs["qwen2moe"], "Qwen2MoeForCausalLM")
    tiny_qwen_moe(dirs["qwen3moe"], "Qwen3MoeForCausalLM")
    tiny_gemma(dirs["gemma2"], "Gemma2ForCausalLM")
    tiny_gemma(dirs["gemma3"], "Gemma3ForCausalLM")
    tiny_phi3(dirs["phi3"])
    tiny_llama(dirs["llama3"])
    tiny_llama2(dirs["llama2"])
    tiny_qwen2(dirs["qwen2"])
    tiny_qwen3(dirs["qwen3"])
    for family, d in dirs.items():
        tokenizer(TOKENIZER_OF.get(family, family), d)
    jobs = [(f, t) for f in dirs for t in OUTTYPES]
    with ThreadPoolExecutor(max_workers=SCRIPT_WORKERS.size) as pool:
        refs = dict(zip(jobs, pool.map(lambda j: reference(dirs[j[0]], j[1]), jobs)))
    return {f: (d, {t: refs[f, t] for t in OUTTYPES}) for f, d in dirs.items()}


@pytest.fixture(scope="module")
def llama3(models):
    return models["llama3"]


@pytest.mark.parametrize("outtype", OUTTYPES)
@pytest.mark.parametrize("family", ["llama3", "llama2", "qwen2", "qwen3", "phi3", "mixtral", "qwen2moe", "qwen3moe",
                                    "gemma2", "gemma3"])
def test_the_scripts_file_byte_for_byte(models, family, outtype, tmp_path):
    """Every family in every outtype; the mixtures of experts with their
    experts stacked per layer, Gemma with 1 added to its norms."""
    model, refs = models[family]
    dst = tmp_path / "model.gguf"
    args = [] if outtype == "auto" else ["--dtype", outtype]
    r = ckpt("convert", model, dst, *args, "-q")
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes() == refs[outtype].read_bytes()


def test_mistral_is_the_scripts_file_byte_for_byte(llama3, tmp_path):
    """MistralForCausalLM: the script's LlamaModel converts it as llama
    (here with Llama 3's tokenizer; Mistral's own are SentencePiece)."""
    model = tmp_path / "tiny-mistral"
    tiny_llama(model, seed=1, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=4096,
               rope_parameters={"rope_theta": 1000000.0, "rope_type": "default"})
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.link(llama3[0] / f, model / f)
    assert_the_scripts_file(model, "bf16", tmp_path)


def test_mistral_with_sentencepiece_is_the_scripts_file_byte_for_byte(models, tmp_path):
    """Mistral 7B v0.1's shape of directory: LlamaModel with the
    SentencePiece tokenizer (tokenizer.model beside tokenizer.json)."""
    model = tmp_path / "tiny-mistral-spm"
    tiny_llama2(model, dtype=torch.bfloat16, seed=5, architectures=["MistralForCausalLM"], model_type="mistral",
                num_key_value_heads=2, sliding_window=4096)
    for f in TOKENIZER_FILES["llama2"]:
        os.link(models["llama2"][0] / f, model / f)
    assert_the_scripts_file(model, "bf16", tmp_path)


@pytest.mark.parametrize("family,rope", [
    ("qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0}),
    ("qwen3", {"rope_type": "yarn", "factor": 2.5, "original_max_position_embeddings": 16384, "rope_theta": 1000000.0,
               "beta_fast": 16.0, "beta_slow": 2.0, "attention_factor": 1.25}),
    ("llama3", {"rope_type": "linear", "factor": 2.0, "rope_theta": 500000.0}),
])
def test_rope_scaling_is_the_scripts_file_byte_for_byte(models, tmp_path, family, rope):
    """TextModel's linear and yarn RoPE scaling: their key-values."""
    model = broken_copy(models[family][0], tmp_path / f"tiny-{family}-rope", config={"rope_parameters": rope})
    assert_the_scripts_file(model, "bf16", tmp_path)


@pytest.mark.parametrize("rope", [
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192, "rope_theta": 500000.0},
    {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
     "original_max_position_embeddings": 4096, "rope_theta": 100000.0},
])
@pytest.mark.parametrize("outtype", ["f32", "q8_0"])
def test_llama31_rope_freqs_is_the_scripts_file_byte_for_byte(models, tmp_path, rope, outtype):
    """Llama 3.1's RoPE: the rope_freqs tensor the script computes from the
    RoPE parameters (first in the file, float32), 64 factors of a head of
    128, those between the wavelengths smoothed."""
    model = tmp_path / "tiny-llama31"
    tiny_llama(model, seed=10, rope_parameters=rope, head_dim=128, num_attention_heads=2, num_key_value_heads=1)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.link(models["llama3"][0] / f, model / f)
    assert_the_scripts_file(model, outtype, tmp_path)


def test_rope_the_script_makes_tensors_of_is_refused(llama3, models, tmp_path):
    """Refused while linear, yarn and (for llama) llama3 are converted."""
    src = broken_copy(llama3[0], tmp_path / "m", config={"rope_parameters": {"rope_type": "dynamic", "factor": 2.0,
                                                                              "rope_theta": 500000.0}})
    refused(src, tmp_path, "config.json", "rope_type", "dynamic", "linear and yarn")
    rope = {"rope_type": "llama3", "factor": 8.0, "rope_theta": 1000000.0}
    src = broken_copy(models["qwen2"][0], tmp_path / "q", config={"rope_parameters": rope})
    refused(src, tmp_path, "config.json", "rope_type", "llama3")


def test_to_gguf_names_the_format(llama3, tmp_path):
    model, refs = llama3
    dst = tmp_path / "model.out"
    r = ckpt("convert", model, dst, "--to", "gguf", "--dtype", "q8_0", "-q")
    assert r.returncode == 0, r.stderr
    assert dst.read_bytes() == refs["q8_0"].read_bytes()


def test_raw_keeps_the_plain_container(llama3, tmp_path):
    model, _ = llama3
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        dst = tmp_path / "raw.gguf"
        r = ckpt("convert", model, dst, "--raw", "-q")
        assert r.returncode == 0, r.stderr
        reader = gguf.GGUFReader(dst)
        assert "model.layers.0.self_attn.q_proj.weight" in {t.name for t in reader.tensors}
        assert "general.architecture" not in reader.fields
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))


def broken_copy(model, dst, drop=(), config=None):
    """The model directory linked file by file into dst, some files left
    out, config.json changed."""
    dst.mkdir()
    for f in model.iterdir():
        if f.name not in drop and f.name != "config.json":
            os.link(f, dst / f.name)
    c = json.loads((model / "config.json").read_text())
    c.update(config or {})
    (dst / "config.json").write_text(json.dumps(c))
    return dst


def refused(src, tmp_path, *words):
    dst = tmp_path / "out" / "model.gguf"
    r = ckpt("convert", src, dst, "-q")
    assert r.returncode != 0
    for w in words:
        assert w in r.stderr, r.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    return r.stderr


def test_unknown_architecture_is_refused_by_name(llama3, tmp_path):
    src = broken_copy(llama3[0], tmp_path / "m", config={"architectures": ["FalconMambaForCausalLM"]})
    refused(src, tmp_path, "config.json", "architectures", "FalconMambaForCausalLM", "--raw")


def test_sentence_transformers_pooling_is_refused(llama3, tmp_path):
    src = broken_copy(llama3[0], tmp_path / "m")
    (src / "modules.json").write_text('[{"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]')
    refused(src, tmp_path, "config.json", "modules.json")


@pytest.mark.parametrize("garbage", [b"", b"\x0a\x05\x0a\x03ab", b"\x0a\x04\x0a\x02\xff\xfe", b"\x0b\x00"])
def test_broken_sentencepiece_model_is_refused(models, tmp_path, garbage):
    """tokenizer.model that is no SentencePiece model (empty, a piece cut
    short, a piece that is not UTF-8, a group) is refused by name."""
    src = broken_copy(models["llama2"][0], tmp_path / "m", drop=("tokenizer.model",))
    (src / "tokenizer.model").write_bytes(garbage)
    refused(src, tmp_path, "tokenizer.model", "not a SentencePiece model")


def test_missing_tokenizer_is_refused(llama3, tmp_path):
    src = broken_copy(llama3[0], tmp_path / "m", drop=("tokenizer.json",))
    refused(src, tmp_path, "tokenizer.json")


@pytest.mark.parametrize("key,value,tensor", [
    ("num_attention_heads", 8, "model.layers.0.self_attn.o_proj.weight"),
    ("num_key_value_heads", 4, "model.layers.0.self_attn.k_proj.weight"),
    ("hidden_size", 48, "lm_head.weight"),
    ("intermediate_size", 128, "model.layers.0.mlp.down_proj.weight"),
])
def test_hyperparameters_that_contradict_shapes_are_refused(llama3, tmp_path, key, value, tensor):
    src = broken_copy(llama3[0], tmp_path / "m", config={key: value})
    refused(src, tmp_path, "config.json", key, tensor)


@pytest.mark.parametrize("where", ["name", "readme"])
def test_qwen3_reranker_is_refused(models, tmp_path, where):
    """The script converts a Qwen3 reranker with a pooling type and a
    classifier head made of two rows of the output: refused by its hint."""
    src = broken_copy(models["qwen3"][0], tmp_path / ("Qwen3-Reranker-0.6B" if where == "name" else "m"))
    if where == "readme":
        (src / "README.md").write_text("---\nlicense: apache-2.0\n---\n# Qwen3-Reranker-0.6B\n")
    refused(src, tmp_path, "qwen3-reranker", "README.md" if where == "readme" else "directory")


def test_phi3_long_context_rope_is_refused(models, tmp_path):
    """Phi-3-128k's longrope: the script makes rope_factors_long/short
    tensors of the factors, which ckpt does not."""
    rope = {"rope_type": "longrope", "rope_theta": 10000.0, "long_factor": [1.0] * 4, "short_factor": [1.0] * 4}
    src = broken_copy(models["phi3"][0], tmp_path / "m", config={"rope_parameters": rope})
    refused(src, tmp_path, "config.json", "rope_type", "longrope")


@pytest.mark.parametrize("key", ["original_max_position_embeddings", "rms_norm_eps"])
def test_phi3_without_a_hyperparameter_it_needs_is_refused(models, tmp_path, key):
    src = broken_copy(models["phi3"][0], tmp_path / "m", config={key: None})
    refused(src, tmp_path, "config.json", key)


def test_codellama_infill_vocabulary_is_refused(models, tmp_path):
    """vocab_size 32016: the script adds CodeLlama's infill token ids."""
    src = tmp_path / "m"
    tiny_llama2(src, vocab_size=32016)
    for f in TOKENIZER_FILES["llama2"]:
        os.link(models["llama2"][0] / f, src / f)
    refused(src, tmp_path, "config.json", "vocab_size", "32016")


def test_vocab_size_that_contradicts_the_embeddings_is_refused(llama3, tmp_path):
    src = broken_copy(llama3[0], tmp_path / "m", config={"vocab_size": 1000})
    refused(src, tmp_path, "config.json", "vocab_size")


def write_moe(out, config, dtype, seed, experts, router, shared=None, qk_norm=False, bias=False, drop=()):
    """config.json and a random model.safetensors of a mixture of experts:
    a Llama-style decoder whose MLP is `router` (n_experts × hidden) and
    each expert's projections (`experts`: name → (rows, cols) of an
    expert, "{e}" for its number), with a shared expert where `shared`
    names its projections; tensors named in `drop` left out."""
    hidden, vocab, layers = config["hidden_size"], config["vocab_size"], config["num_hidden_layers"]
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim", hidden // heads)
    n = config.get("num_local_experts", config.get("num_experts"))
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    sd = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": w(hidden)}
    if not config["tie_word_embeddings"]:
        sd["lm_head.weight"] = w(vocab, hidden)
    for i in range(layers):
        p = f"model.layers.{i}."
        sd |= {p + "input_layernorm.weight": w(hidden), p + "post_attention_layernorm.weight": w(hidden),
               p + "self_attn.o_proj.weight": w(hidden, heads * head_dim), p + router: w(n, hidden)}
        for proj, rows in (("q", heads * head_dim), ("k", kv_heads * head_dim), ("v", kv_heads * head_dim)):
            sd[p + f"self_attn.{proj}_proj.weight"] = w(rows, hidden)
            if bias:
                sd[p + f"self_attn.{proj}_proj.bias"] = w(rows)
        if qk_norm:
            sd |= {p + "self_attn.q_norm.weight": w(head_dim), p + "self_attn.k_norm.weight": w(head_dim)}
        for e in range(n):
            sd |= {p + name.format(e=e): w(*shape) for name, shape in experts.items()}
        for name, shape in (shared or {}).items():
            sd[p + name] = w(*shape)
    for name in drop:
        del sd[name]
    out.mkdir(parents=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


def tiny_mixtral(out, dtype=torch.bfloat16, seed=7, drop=(), **config_changes):
    """A random Mixtral of 2 layers and hidden size 32 (4 heads of 8, 2 KV
    heads), 4 experts of width 64, 2 per token; Llama 2's tokenizer."""
    hidden, ff, layers, heads, kv_heads, vocab = 32, 64, 2, 4, 2, 32000
    config = {
        "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "dtype": "bfloat16",
        "eos_token_id": 2, "head_dim": hidden // heads, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": ff, "max_position_embeddings": 32768, "model_type": "mixtral",
        "num_attention_heads": heads, "num_experts_per_tok": 2, "num_hidden_layers": layers,
        "num_key_value_heads": kv_heads, "num_local_experts": 4, "output_router_logits": False,
        "rms_norm_eps": 1e-05, "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"},
        "router_aux_loss_coef": 0.02, "router_jitter_noise": 0.0, "sliding_window": None,
        "tie_word_embeddings": False, "transformers_version": "5.23.0", "use_cache": True, "vocab_size": vocab}
    config |= config_changes
    hidden, ff = config["hidden_size"], config["intermediate_size"]
    experts = {"block_sparse_moe.experts.{e}.w1.weight": (ff, hidden), "block_sparse_moe.experts.{e}.w2.weight":
               (hidden, ff), "block_sparse_moe.experts.{e}.w3.weight": (ff, hidden)}
    write_moe(out, config, dtype, seed, experts, "block_sparse_moe.gate.weight", drop=drop)


def tiny_qwen_moe(out, arch, dtype=torch.bfloat16, seed=8, drop=(), **config_changes):
    """A random Qwen2-MoE (with its shared expert and its gate, Q/K/V
    biases) or Qwen3-MoE (Q and K norms, head_dim 16) of 2 layers, hidden
    size 32, 4 experts of width 16, 2 per token, the embeddings tied."""
    hidden, layers, heads, kv_heads, vocab, moe_ff, shared_ff = 32, 2, 4, 2, 151936, 16, 48
    qwen3 = arch == "Qwen3MoeForCausalLM"
    config = {
        "architectures": [arch], "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
        "dtype": "bfloat16", "eos_token_id": 151645, "hidden_act": "silu", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": 64, "max_position_embeddings": 32768,
        "max_window_layers": layers, "mlp_only_layers": [], "model_type": "qwen3_moe" if qwen3 else "qwen2_moe",
        "moe_intermediate_size": moe_ff, "norm_topk_prob": qwen3, "num_attention_heads": heads,
        "num_experts": 4, "num_experts_per_tok": 2, "num_hidden_layers": layers, "num_key_value_heads": kv_heads,
        "output_router_logits": False, "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_theta": 1000000.0, "rope_type": "default"}, "router_aux_loss_coef": 0.001,
        "sliding_window": None, "tie_word_embeddings": True, "use_cache": True, "use_sliding_window": False,
        "vocab_size": vocab}
    if qwen3:
        config |= {"head_dim": 16, "attention_bias": False}
    else:
        config |= {"shared_expert_intermediate_size": shared_ff, "qkv_bias": True}
    hd = config.get("head_dim", hidden // heads)
    experts = {"mlp.experts.{e}.down_proj.weight": (hidden, moe_ff), "mlp.experts.{e}.gate_proj.weight":
               (moe_ff, hidden), "mlp.experts.{e}.up_proj.weight": (moe_ff, hidden)}
    shared = None if qwen3 else {
        "mlp.shared_expert.gate_proj.weight": (shared_ff, hidden), "mlp.shared_expert.up_proj.weight": (shared_ff, hidden),
        "mlp.shared_expert.down_proj.weight": (hidden, shared_ff), "mlp.shared_expert_gate.weight": (1, hidden)}
    assert hd
    write_moe(out, config | config_changes, dtype, seed, experts, "mlp.gate.weight", shared=shared, qk_norm=qwen3,
              bias=not qwen3, drop=drop)


def tiny_gemma(out, arch, dtype=torch.bfloat16, seed=9, **config_changes):
    """A random Gemma 2 or Gemma 3 of 2 layers (or num_hidden_layers), hidden size 32 (4 heads of
    16, 2 KV heads), its four norms a layer (Gemma 3: Q and K norms too),
    the embeddings tied; Llama 2's SentencePiece tokenizer (vocab 32000)."""
    hidden, ff, layers, heads, kv_heads, head_dim, vocab = 32, 64, 2, 4, 2, 16, 32000
    gemma3 = arch == "Gemma3ForCausalLM"
    config = {
        "architectures": [arch], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 2,
        "dtype": "bfloat16", "eos_token_id": 1, "final_logit_softcapping": None if gemma3 else 30.0,
        "head_dim": head_dim, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": hidden,
        "initializer_range": 0.02, "intermediate_size": ff, "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 8192, "model_type": "gemma3_text" if gemma3 else "gemma2",
        "num_attention_heads": heads, "num_hidden_layers": layers, "num_key_value_heads": kv_heads,
        "pad_token_id": 0, "query_pre_attn_scalar": head_dim, "rms_norm_eps": 1e-06, "sliding_window": 512,
        "tie_word_embeddings": True, "transformers_version": "5.23.0", "use_cache": True, "vocab_size": vocab}
    if gemma3:
        config |= {"attn_logit_softcapping": None, "use_bidirectional_attention": False,
                   "rope_parameters": {"full_attention": {"rope_theta": 1000000.0, "rope_type": "default"},
                                       "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"}}}
    else:
        config |= {"attn_logit_softcapping": 50.0, "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}}
    config |= config_changes
    g = torch.Generator().manual_seed(seed)

    def w(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).to(dtype)

    sd = {"model.embed_tokens.weight": w(vocab, hidden), "model.norm.weight": w(hidden)}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        sd |= {p + n: w(hidden) for n in ("input_layernorm.weight", "post_attention_layernorm.weight",
                                          "pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight")}
        sd |= {p + "self_attn.q_proj.weight": w(heads * head_dim, hidden),
               p + "self_attn.k_proj.weight": w(kv_heads * head_dim, hidden),
               p + "self_attn.v_proj.weight": w(kv_heads * head_dim, hidden),
               p + "self_attn.o_proj.weight": w(hidden, heads * head_dim), p + "mlp.gate_proj.weight": w(ff, hidden),
               p + "mlp.up_proj.weight": w(ff, hidden), p + "mlp.down_proj.weight": w(hidden, ff)}
        if gemma3:
            sd |= {p + "self_attn.q_norm.weight": w(head_dim), p + "self_attn.k_norm.weight": w(head_dim)}
    out.mkdir(parents=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2))


def test_gemma2_of_float16_with_lm_head_is_the_scripts_file_byte_for_byte(models, tmp_path):
    """Float16 norms + 1 rounded to float16 as torch adds them; an untied
    lm_head, which the script drops."""
    model = tmp_path / "tiny-gemma2-f16"
    tiny_gemma(model, "Gemma2ForCausalLM", dtype=torch.float16, seed=11, tie_word_embeddings=False)
    from safetensors.torch import load_file
    sd = load_file(str(model / "model.safetensors"))
    sd["lm_head.weight"] = torch.randn(32000, 32, generator=torch.Generator().manual_seed(12)).to(torch.float16)
    save_file(sd, str(model / "model.safetensors"), metadata={"format": "pt"})
    for f in TOKENIZER_FILES["llama2"]:
        os.link(models["llama2"][0] / f, model / f)
    for outtype in ("bf16", "f32"):
        assert_the_scripts_file(model, outtype, tmp_path)
        os.remove(tmp_path / "model.gguf")


def moe_copy(models, family, dst, **changes):
    """A mixture of experts' model directory made anew (config changes,
    tensors dropped), with its family's tokenizer."""
    kind = {"mixtral": None, "qwen2moe": "Qwen2MoeForCausalLM", "qwen3moe": "Qwen3MoeForCausalLM"}[family]
    if kind:
        tiny_qwen_moe(dst, kind, **changes)
    else:
        tiny_mixtral(dst, **changes)
    files = TOKENIZER_FILES.get(family, ("tokenizer.json", "tokenizer_config.json"))
    for f in files:
        os.link(models[family][0] / f, dst / f)
    return dst


@pytest.mark.parametrize("family,key,tensor", [
    ("mixtral", "num_local_experts", "model.layers.1.block_sparse_moe.experts.2.w3.weight"),
    ("qwen2moe", "num_experts", "model.layers.0.mlp.experts.3.down_proj.weight"),
])
def test_missing_expert_tensor_is_refused(models, tmp_path, family, key, tensor):
    """An expert the config counts and the weights lack: the weights' file,
    the missing tensor and the config's key."""
    src = moe_copy(models, family, tmp_path / "m", drop=(tensor,))
    refused(src, tmp_path, "model.safetensors", tensor, key)


@pytest.mark.parametrize("family,key,count,word", [
    ("mixtral", "num_local_experts", 2, "experts.2."),   # fewer experts than the weights hold
    ("mixtral", "num_local_experts", 8, "block_sparse_moe.gate.weight"),  # more: the router has 4 rows
    ("qwen3moe", "num_experts", 3, "experts.3."),
])
def test_expert_count_that_contradicts_the_tensors_is_refused(models, tmp_path, family, key, count, word):
    src = moe_copy(models, family, tmp_path / "m")
    c = json.loads((src / "config.json").read_text())
    c[key] = count
    (src / "config.json").write_text(json.dumps(c))
    refused(src, tmp_path, key, word)


def test_expert_tensors_stream_in_bounded_memory(models, tmp_path):
    """A layer of 8 experts of 8192 × 512 (three stacks of 128 MiB each in
    f32): ckpt's peak RSS stays under 64 MiB, less than one stack (the
    script holds every stack whole)."""
    src = tmp_path / "big-mixtral"
    tiny_mixtral(src, seed=13, hidden_size=512, intermediate_size=8192, num_local_experts=8, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=128)
    for f in TOKENIZER_FILES["mixtral"]:
        os.link(models["mixtral"][0] / f, src / f)
    dst = tmp_path / "big.gguf"
    code = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:]); "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)")
    r = subprocess.run([sys.executable, "-c", code, BIN_PATH, "convert", src, dst, "--dtype", "f32", "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    peak_mib = int(r.stdout.split()[-1]) / 1024
    sys.path.insert(0, str(LLAMA_CPP / "gguf-py"))
    try:
        import gguf
        t = {t.name: t for t in gguf.GGUFReader(dst).tensors}["blk.0.ffn_gate_exps.weight"]
        assert list(t.shape) == [512, 8192, 8] and t.n_bytes == 128 << 20
    finally:
        sys.path.remove(str(LLAMA_CPP / "gguf-py"))
    assert peak_mib < 64, f"peak RSS {peak_mib:.1f} MiB"


# ---- memory: Llama 3's tokenizer streamed ----------------------------------------------------------------------

def measured(*args):
    """A ckpt command's exit status, stderr, peak RSS (bytes) and CPU
    seconds: run by a bare Python (this process, with torch loaded, would
    lend the child its own RSS before the exec), which reports its
    children's rusage."""
    probe = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
             "stderr=subprocess.PIPE); u = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print(r.returncode, u.ru_maxrss, u.ru_utime + u.ru_stime); sys.stdout.write(r.stderr.decode())")
    r = subprocess.run([sys.executable, "-S", "-c", probe, BIN_PATH, *map(str, args)], capture_output=True, text=True)
    head, _, err = r.stdout.partition("\n")
    rc, rss, cpu = head.split()
    return int(rc), err, int(rss) << 10, float(cpu)


def test_llama3_tokenizer_converts_in_bounded_memory(llama3, tmp_path):
    """Llama 3's 17 MB tokenizer.json (128,256 tokens, 280,147 merges) is
    read through a window, its vocabulary and merges encoded as they stream
    by and handed to the GGUF writer encoded: the tiny model's conversion
    peaks far below the 64 MiB target (26 MB; 78 MB when the file was
    parsed whole into a million JSON nodes and the key-values went to the
    writer as JSON text it parsed again), and is still the script's file."""
    model, refs = llama3
    dst = tmp_path / "model.gguf"
    rc, err, rss, cpu = measured("convert", model, dst, "-q")
    assert rc == 0, err
    assert dst.read_bytes() == refs["auto"].read_bytes()
    assert rss <= 40 << 20, f"peak RSS {rss / 2**20:.1f} MiB, CPU {cpu:.2f} s"


def damaged_tokenizer(llama3, dst, damage):
    """The Llama 3 model with its tokenizer.json's bytes changed by `damage`."""
    dst.mkdir()
    for f in llama3[0].iterdir():
        if f.name != "tokenizer.json":
            os.link(f, dst / f.name)
    (dst / "tokenizer.json").write_bytes(damage((llama3[0] / "tokenizer.json").read_bytes()))
    return dst


def test_damaged_tokenizer_json_is_refused_at_its_byte(llama3, tmp_path):
    """What the streamed reading refuses it names as the whole-file parse
    did: the file, the key and the byte, also deep in the vocabulary and
    merges and at a refill's edge."""
    text = (llama3[0] / "tokenizer.json").read_bytes()
    vocab, merges = text.index(b'"vocab": {'), text.index(b'"merges": [')
    comma = text.index(b",", vocab)
    first_merge = text.index(b"[", merges + len(b'"merges": ['))
    id_at = text.index(b"0", vocab + 10)
    first_key = text.index(b'"', vocab + len(b'"vocab": {')) + 1
    cases = [
        (lambda t: t[: len(t) // 2], [f"at byte {len(text) // 2}", "not JSON"]),
        (lambda t: t[:comma] + b",," + t[comma + 1:], [f"at byte {comma + 1}", "expected a string key"]),
        (lambda t: t[:first_merge] + b"7" + t[t.index(b"]", first_merge) + 1:],
         [f"at byte {first_merge}", "model.merges", "a merge is a string"]),
        (lambda t: t[:id_at] + b"-1" + t[id_at + 1:], [f"at byte {id_at}", "model.vocab", "whole number"]),
        (lambda t: t + b" x", [f"at byte {len(text) + 1}", "trailing characters"]),
        # bytes that are no UTF-8 (json.load refuses the file): a token, a merge's part
        (lambda t: t[:first_key] + b"\xff" + t[first_key:], ["model.vocab", "not UTF-8 text"]),
        (lambda t: t[:first_merge] + b'["\xff", "x"]' + t[t.index(b"]", first_merge) + 1:],
         [f"at byte {first_merge}", "model.merges", "of UTF-8 text"]),
    ]
    for i, (damage, words) in enumerate(cases):
        src = damaged_tokenizer(llama3, tmp_path / f"m{i}", damage)
        stderr = refused(src, tmp_path, "tokenizer.json", *words)
        assert stderr.count("\n") == 1, stderr
