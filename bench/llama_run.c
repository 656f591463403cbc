/* llama.cpp running a GGUF file, for the llamacpp bench suite
 * (bench/llamacpp_suite.py): built against the libllama of the
 * llama-cpp-python sdist by `make llama-cpp-build`, never part of ckpt.
 *
 *   ckpt-llama-run tokenize MODEL.gguf TEXT_FILE
 *       prints, as a JSON list, the ids llama.cpp's tokenizer gives the
 *       file's text, with the special tokens the model adds (BOS ...) and
 *       special tokens in the text read as such (as HF tokenizers do).
 *   ckpt-llama-run logits MODEL.gguf OUT.f32 ID ID ...
 *       runs the model on those token ids in one batch (KV cache in F32, so
 *       that only the weights' type differs from an F32 reference) and
 *       writes every position's logits, n_tokens x n_vocab float32, to OUT.
 *
 * Exit status 0, or 1 with a message on stderr. */
#include <llama.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char *text, void *user) {
    (void)user;
    if (level == GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static int fail(const char *what, const char *where) {
    fprintf(stderr, "ckpt-llama-run: %s: %s\n", what, where);
    return 1;
}

static char *read_text(const char *path, int *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && n < (1L << 30) && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = 0;
        *len = (int)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static int tokenize(const struct llama_model *model, const char *text_path) {
    int len = 0;
    char *text = read_text(text_path, &len);
    if (!text)
        return fail("cannot read", text_path);
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int n = -llama_tokenize(vocab, text, len, NULL, 0, true, true);
    llama_token *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    if (!ids || llama_tokenize(vocab, text, len, ids, n, true, true) != n) {
        free(text);
        free(ids);
        return fail("tokenization failed", text_path);
    }
    putchar('[');
    for (int i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    puts("]");
    free(text);
    free(ids);
    return 0;
}

static int logits(struct llama_model *model, const char *out_path, int n, char **ids) {
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)(n < 64 ? 64 : n);
    cp.n_threads = cp.n_threads_batch = 2;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx)
        return fail("cannot make a context for", out_path);
    struct llama_batch batch = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        batch.token[i] = atoi(ids[i]);
        batch.pos[i] = i;
        batch.n_seq_id[i] = 1;
        batch.seq_id[i][0] = 0;
        batch.logits[i] = 1;
    }
    batch.n_tokens = n;
    int rc = llama_decode(ctx, batch);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *out = rc == 0 ? fopen(out_path, "wb") : NULL;
    for (int i = 0; out && i < n; i++) {
        const float *row = llama_get_logits_ith(ctx, i);
        if (!row || fwrite(row, sizeof *row, (size_t)n_vocab, out) != (size_t)n_vocab)
            rc = -1;
    }
    if (out && fclose(out) != 0)
        rc = -1;
    llama_batch_free(batch);
    llama_free(ctx);
    return rc == 0 && out ? 0 : fail("decoding or writing the logits failed", out_path);
}

int main(int argc, char **argv) {
    int is_tokenize = argc == 4 && !strcmp(argv[1], "tokenize");
    if (!is_tokenize && !(argc >= 5 && !strcmp(argv[1], "logits"))) {
        fputs("usage: ckpt-llama-run tokenize MODEL.gguf TEXT_FILE | logits MODEL.gguf OUT.f32 ID...\n", stderr);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.vocab_only = is_tokenize;
    struct llama_model *model = llama_model_load_from_file(argv[2], mp);
    if (!model)
        return fail("llama.cpp cannot load", argv[2]);
    int rc = is_tokenize ? tokenize(model, argv[3]) : logits(model, argv[3], argc - 4, argv + 4);
    llama_model_free(model);
    llama_backend_free();
    return rc;
}
