"""A transformers-style Flax GPT-2 (the module and parameter layout of
transformers' FlaxGPT2LMHeadModel: transformer.{wte, wpe, h.<i>.{ln_1,
attn.{c_attn, c_proj}, ln_2, mlp.{c_fc, c_proj}}, ln_f} with Conv1D
kernels stored (out, in), and an untied lm_head), written here because no
Flax-capable transformers installs with the project's pins (transformers
4.x needs huggingface_hub < 1.0; 5.x has no Flax models)."""
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

CONFIG = dict(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=4)


class Conv1D(nn.Module):
    features: int

    @nn.compact
    def __call__(self, x):
        kernel = self.param("kernel", nn.initializers.normal(0.02), (self.features, x.shape[-1]))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        return x @ kernel.T + bias


class Attention(nn.Module):
    n_embd: int
    n_head: int

    @nn.compact
    def __call__(self, x):
        b, t, c = x.shape
        h = self.n_head
        q, k, v = jnp.split(Conv1D(3 * c, name="c_attn")(x), 3, axis=-1)
        q, k, v = (a.reshape(b, t, h, c // h) for a in (q, k, v))
        att = jnp.einsum("bthd,bshd->bhts", q, k) / math.sqrt(c // h)
        att = jnp.where(jnp.tril(jnp.ones((t, t), bool)), att, -1e9)
        out = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(att, axis=-1), v).reshape(b, t, c)
        return Conv1D(c, name="c_proj")(out)


class MLP(nn.Module):
    n_embd: int

    @nn.compact
    def __call__(self, x):
        return Conv1D(self.n_embd, name="c_proj")(jax.nn.gelu(Conv1D(4 * self.n_embd, name="c_fc")(x)))


class Block(nn.Module):
    n_embd: int
    n_head: int

    @nn.compact
    def __call__(self, x):
        x = x + Attention(self.n_embd, self.n_head, name="attn")(nn.LayerNorm(1e-5, name="ln_1")(x))
        return x + MLP(self.n_embd, name="mlp")(nn.LayerNorm(1e-5, name="ln_2")(x))


class BlockCollection(nn.Module):
    n_embd: int
    n_head: int
    n_layer: int

    @nn.compact
    def __call__(self, x):
        for i in range(self.n_layer):
            x = Block(self.n_embd, self.n_head, name=str(i))(x)
        return x


class GPT2Module(nn.Module):
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int

    @nn.compact
    def __call__(self, ids):
        pos = jnp.arange(ids.shape[1])[None]
        x = nn.Embed(self.vocab_size, self.n_embd, name="wte")(ids) + nn.Embed(self.n_positions, self.n_embd,
                                                                                name="wpe")(pos)
        x = BlockCollection(self.n_embd, self.n_head, self.n_layer, name="h")(x)
        return nn.LayerNorm(1e-5, name="ln_f")(x)


class GPT2LMHeadModel(nn.Module):
    vocab_size: int
    n_positions: int
    n_embd: int
    n_layer: int
    n_head: int

    @nn.compact
    def __call__(self, ids):
        x = GPT2Module(self.vocab_size, self.n_positions, self.n_embd, self.n_layer, self.n_head,
                       name="transformer")(ids)
        return nn.Dense(self.vocab_size, use_bias=False, name="lm_head")(x)


def model():
    return GPT2LMHeadModel(**CONFIG)


def dummy_input():
    return jnp.zeros((1, 8), jnp.int32)
