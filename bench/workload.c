/* workload.c — reuse workloads: synthetic documents, repeated prompts, HotpotQA / MuSiQue doc QA, LoCoMo chat, SkillsBench skills. */
#include "workload.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "reprise.h"
#include "retrieve_embed.h"

struct rp_workload {
    rp_query *q;
    int n_q, cap_q;
    int32_t max_tokens;
    json_t *emb;           /* --embeddings, or the vectors --retrieve-model made (NULL: keyword retrieval) */
    rp_model *emb_model;   /* --retrieve-model, and its embedder (NULL: none) */
    rp_embedder *embedder;
    json_t *texts, *seen;  /* --export-texts: texts retrieval saw, in order, and the set of them */
};

rp_workload_params rp_workload_default_params(void) {
    rp_workload_params p = {.n_queries = 8, .n_docs = 6, .doc_len = 0, .tail_len = 40, .max_tokens = 3072, .seed = 1};
    return p;
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- prompt assembly from segments of token ids ---- */

typedef struct seg {
    const rp_token *t;
    int32_t n;
} seg;

static bool make_prompt(const seg *segs, int n_segs, int32_t max_tokens, rp_wprompt *out) {
    int32_t total = 0;
    for (int i = 0; i < n_segs; i++) total += segs[i].n;
    if (total > max_tokens) total = max_tokens;
    out->toks = malloc(sizeof(rp_token) * (size_t)(total > 0 ? total : 1));
    out->bounds = malloc(sizeof(int32_t) * (size_t)(n_segs + 1));
    if (!out->toks || !out->bounds) return false;
    out->n = 0;
    out->n_bounds = 0;
    for (int i = 0; i < n_segs && out->n < total; i++) {
        if (segs[i].n == 0) continue;
        if (out->n > 0) out->bounds[out->n_bounds++] = out->n;
        int32_t k = segs[i].n < total - out->n ? segs[i].n : total - out->n;
        memcpy(out->toks + out->n, segs[i].t, sizeof(rp_token) * (size_t)k);
        out->n += k;
    }
    return true;
}

static rp_query *new_query(rp_workload *w, int n_warm) {
    if (w->n_q == w->cap_q) {
        int nc = w->cap_q ? 2 * w->cap_q : 16;
        rp_query *nq = realloc(w->q, sizeof *nq * (size_t)nc);
        if (!nq) return NULL;
        w->q = nq;
        w->cap_q = nc;
    }
    rp_query *q = &w->q[w->n_q++];
    memset(q, 0, sizeof *q);
    q->warm = calloc((size_t)(n_warm > 0 ? n_warm : 1), sizeof *q->warm);
    return q->warm ? q : NULL;
}

rp_status rp_wprompt_fill(rp_prompt *p, const rp_token *toks, int32_t n, const int32_t *bounds, int32_t n_bounds) {
    rp_prompt_clear(p);
    int32_t at = 0;
    for (int32_t i = 0; i <= n_bounds; i++) {
        const int32_t end = i < n_bounds ? bounds[i] : n;
        if (end <= at || end > n) continue;
        const rp_status st = rp_prompt_add_tokens(p, toks + at, end - at, true);
        if (st != RP_OK) return st;
        at = end;
    }
    return RP_OK;
}

static void note_len(rp_workload *w, const rp_wprompt *p) {
    if (p->n > w->max_tokens) w->max_tokens = p->n;
}

/* Tokens of a text (no BOS; special-token texts parsed only in template text we render: data is data). */
static bool tokenize_ex(const rp_model *m, const char *text, bool special, rp_token **out, int32_t *n) {
    size_t len = strlen(text), cap = len + 8;
    int32_t got = 0;
    *out = malloc(sizeof(rp_token) * cap);
    if (!*out) return false;
    if (rp_tokenize(m, text, len, false, special, *out, (int32_t)cap, &got) != RP_OK) return false;
    *n = got;
    return true;
}

static bool tokenize(const rp_model *m, const char *text, rp_token **out, int32_t *n) {
    return tokenize_ex(m, text, false, out, n);
}

/* Whether the vocabulary asks for BOS at the start of a prompt (what rp_tokenize's add_bos then adds). */
static bool adds_bos(const rp_model *m) {
    rp_token t[2];
    int32_t n = 0;
    return rp_tokenize(m, "", 0, true, false, t, 2, &n) == RP_OK && n == 1;
}

/* ---- synthetic: random-token documents, reused in a new order ---- */

void rp_workload_token_range(int32_t V, int32_t *lo, int32_t *hi) {
    *lo = V > 1024 ? 300 : 3;
    *hi = V > 1024 ? (V < 30000 ? V - 100 : 30000) : V;
}

static bool build_synthetic(rp_workload *w, const rp_model *m, const rp_workload_params *p, bool repeat) {
    uint64_t s = p->seed * 0x9e3779b97f4a7c15ULL + 1;
    const int pool = p->n_docs * 4;
    const int32_t V = rp_model_describe(m).n_vocab;
    int32_t lo, hi;
    rp_workload_token_range(V, &lo, &hi);
    rp_token **docs = calloc((size_t)pool, sizeof *docs);
    rp_token *tail = malloc(sizeof(rp_token) * (size_t)p->tail_len);
    /* new text before each document of the timed prompt (--between) */
    rp_token *between = malloc(sizeof(rp_token) * (size_t)(p->between_len * p->n_docs + 1));
    rp_token bos = rp_token_bos(m);
    if (!docs || !tail || !between) return false;
    for (int d = 0; d < pool; d++) {
        docs[d] = malloc(sizeof(rp_token) * (size_t)p->doc_len);
        if (!docs[d]) return false;
        for (int i = 0; i < p->doc_len; i++) docs[d][i] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
    }
    seg segs[140];
    for (int qi = 0; qi < p->n_queries; qi++) {
        int pick[64];
        for (int i = 0; i < p->n_docs; i++) {
            bool dup;
            do {
                pick[i] = (int)(rng(&s) % (uint64_t)pool);
                dup = false;
                for (int j = 0; j < i; j++) dup |= pick[j] == pick[i];
            } while (dup);
        }
        for (int i = 0; i < p->tail_len; i++) tail[i] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
        for (int i = 0; i < p->between_len * p->n_docs; i++) between[i] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
        rp_query *q = new_query(w, 1);
        if (!q) return false;
        q->n_warm = 1;
        int ns = 0;
        if (bos >= 0) segs[ns++] = (seg){&bos, 1};
        /* warm-up: the same documents in another order (reversed) with another tail */
        for (int i = p->n_docs - 1; i >= 0; i--) segs[ns++] = (seg){docs[pick[i]], p->doc_len};
        if (!repeat) {
            if (!make_prompt(segs, ns, p->max_tokens, &q->warm[0])) return false;
        }
        ns = bos >= 0 ? 1 : 0;
        for (int i = 0; i < p->n_docs; i++) {
            if (p->between_len > 0) segs[ns++] = (seg){between + (size_t)i * p->between_len, p->between_len};
            segs[ns++] = (seg){docs[pick[i]], p->doc_len};
        }
        segs[ns++] = (seg){tail, p->tail_len};
        if (!make_prompt(segs, ns, p->max_tokens, &q->prompt)) return false;
        if (repeat && !make_prompt(segs, ns, p->max_tokens, &q->warm[0])) return false;   /* exactly the same prompt */
        note_len(w, &q->warm[0]);
        note_len(w, &q->prompt);
    }
    for (int d = 0; d < pool; d++) free(docs[d]);
    free(docs);
    free(tail);
    free(between);
    return true;
}

/* ---- text retrieval: keyword overlap weighted by idf, or cosine of caller-supplied embeddings ---- */

static int lower_words(const char *t, char words[][24], int cap) {
    int n = 0;
    while (*t && n < cap) {
        while (*t && !isalnum((unsigned char)*t)) t++;
        int k = 0;
        while (*t && isalnum((unsigned char)*t)) {
            if (k < 23) words[n][k++] = (char)tolower((unsigned char)*t);
            t++;
        }
        if (k >= 3) { words[n][k] = 0; n++; }   /* short words are mostly stop words */
    }
    return n;
}

/* Whether chunk holds word (lower case) at a word start, case-insensitively:
 * a prefix match, so "play" also finds "played" (a crude stemmer). */
static bool has_word(const char *chunk, const char *word) {
    const size_t L = strlen(word);
    for (const char *c = chunk; *c; c++) {
        if (c != chunk && isalnum((unsigned char)c[-1])) continue;
        size_t k = 0;
        while (k < L && c[k] && tolower((unsigned char)c[k]) == word[k]) k++;
        if (k == L) return true;
    }
    return false;
}

/* First words of a text, for messages. */
static const char *first_words(const char *t, char *buf, size_t cap) {
    size_t n = 0;
    int spaces = 0;
    while (*t && isspace((unsigned char)*t)) t++;
    for (; *t && n + 4 < cap; t++) {
        if (isspace((unsigned char)*t)) {
            while (isspace((unsigned char)t[1])) t++;   /* one space for a run */
            if (++spaces == 8 || !t[1]) break;
            buf[n++] = ' ';
        } else {
            buf[n++] = *t;
        }
    }
    if (*t) { memcpy(buf + n, "...", 3); n += 3; }
    buf[n] = 0;
    return buf;
}

/* The vector of a text in an embeddings object, or NULL (with a message). */
static const json_t *vector_of(const json_t *emb, const char *text, size_t *dim) {
    const json_t *v = json_object_get(emb, text);
    char fw[128];
    if (!json_is_array(v) || json_array_size(v) == 0) {
        fprintf(stderr, "reprise: --embeddings has no vector for the text \"%s\" (--export-texts lists the texts "
                        "retrieval needs)\n", first_words(text, fw, sizeof fw));
        return NULL;
    }
    if (*dim == 0) *dim = json_array_size(v);
    if (json_array_size(v) != *dim) {
        fprintf(stderr, "reprise: --embeddings: the vector of \"%s\" has %zu dimensions, others %zu\n",
                first_words(text, fw, sizeof fw), json_array_size(v), *dim);
        return NULL;
    }
    return v;
}

static double cosine(const json_t *a, const json_t *b, size_t dim) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < dim; i++) {
        double x = json_number_value(json_array_get(a, i)), y = json_number_value(json_array_get(b, i));
        ab += x * y;
        aa += x * x;
        bb += y * y;
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

typedef struct ranked {
    double score;
    int idx;
} ranked;

static int by_score(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->idx - y->idx;
}

int rp_retrieve(const char *question, const char *const *chunks, int n, int k, const json_t *emb, int *out) {
    if (n <= 0 || k <= 0) return 0;
    ranked *r = malloc(sizeof *r * (size_t)n);
    if (!r) return -1;
    for (int i = 0; i < n; i++) r[i] = (ranked){0, i};
    if (emb) {
        size_t dim = 0;
        const json_t *qv = vector_of(emb, question, &dim);
        for (int i = 0; qv && i < n; i++) {
            const json_t *cv = vector_of(emb, chunks[i], &dim);
            if (!cv) qv = NULL;
            else r[i].score = cosine(qv, cv, dim);
        }
        if (!qv) { free(r); return -1; }
    } else {
        static char qw[128][24];
        const int nq = lower_words(question, qw, 128);
        for (int w = 0; w < nq; w++) {
            bool dup = false;
            for (int j = 0; j < w && !dup; j++) dup = !strcmp(qw[w], qw[j]);
            if (dup) continue;
            int df = 0;
            for (int i = 0; i < n; i++) df += has_word(chunks[i], qw[w]);
            if (df == 0) continue;
            /* a word in every chunk still counts a little, so ties break towards more matches */
            const double idf = log(1.0 + (double)n / (double)df);
            for (int i = 0; i < n; i++)
                if (has_word(chunks[i], qw[w])) r[i].score += idf;
        }
    }
    qsort(r, (size_t)n, sizeof *r, by_score);
    const int got = k < n ? k : n;
    for (int i = 0; i < got; i++) out[i] = r[i].idx;
    free(r);
    return got;
}

/* Splits text into ~target-character chunks at sentence / line ends. */
static int split_chars(const char *text, int target, char **out, int cap) {
    int n = 0;
    size_t len = strlen(text), pos = 0;
    while (pos < len && n < cap) {
        size_t end = pos + (size_t)target;
        if (end >= len) end = len;
        else {
            size_t e = end;
            while (e > pos + (size_t)target / 2 && text[e] != '.' && text[e] != '\n') e--;
            if (e > pos + (size_t)target / 2) end = e + 1;
        }
        out[n] = strndup(text + pos, end - pos);
        if (!out[n]) break;
        n++;
        pos = end;
    }
    return n;
}

/* Texts retrieval saw, for --export-texts (each once). */
static void note_text(json_t *texts, json_t *seen, const char *t) {
    if (!texts || json_object_get(seen, t)) return;
    json_object_set_new(seen, t, json_true());
    json_array_append_new(texts, json_string(t));
}

/* The text before the chunks (system) and after them (the question) of a
 * retrieval prompt. A model with an instruct template (Llama 3, ChatML) gets
 * one user turn holding the instruction, the passages and the question, then
 * the assistant header, so it answers in the format it was trained on (its
 * F1 means something); the passages stay segments of their own, between the
 * two halves. Other models get plain text. *special: the texts hold
 * special-token texts to parse. */
static bool prompt_texts(const rp_model *m, const rp_workload_params *p, const char *system, const char *question,
                         char **head, char **tail, bool *special) {
    *special = false;
    const char *fmt = rp_model_describe(m).chat_format;
    if (!p->plain && (!strcmp(fmt, "llama3") || !strcmp(fmt, "chatml"))) {
        /* render with a marker where the passages go, then cut there */
        static const char mark[] = "\x1f\x1f";
        size_t n = strlen(system) + strlen(question) + 64;
        char *content = malloc(n), *out = NULL;
        if (!content) return false;
        snprintf(content, n, "%s%s\n\nQuestion: %s", system, mark, question);
        const rp_chat_message msg = {.role = "user", .content = content};
        size_t len = 0;
        rp_status st = rp_chat_render(m, &msg, 1, NULL, true, NULL, 0, &len);
        if (st == RP_ERR_FULL) {   /* the size it needs */
            out = malloc(len + 1);
            st = out ? rp_chat_render(m, &msg, 1, NULL, true, out, len + 1, &len) : RP_ERR_NOMEM;
        }
        free(content);
        char *at = st == RP_OK ? strstr(out, mark) : NULL;
        if (at) {
            *at = 0;
            *head = strdup(out);
            *tail = strdup(at + strlen(mark));
            free(out);
            *special = true;
            return *head && *tail;
        }
        free(out);   /* no marker (cannot happen): plain text */
    }
    const size_t n = strlen(question) + 32;
    *head = strdup(system);
    *tail = malloc(n);
    if (*tail) snprintf(*tail, n, "\n\nQuestion: %s\nAnswer:", question);
    return *head && *tail;
}

/* Query from retrieved text chunks: the warm-up prompts cache the chunks in
 * warm[] (each after the system text: the document database); the prompt is
 * system + the top-k chunks in retrieval order + the question. */
static bool add_retrieval_query(rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *system,
                                char *const *chunks, int n_chunks, const int *warm, int n_warm, const char *question,
                                const char *answer) {
    int *order = malloc(sizeof(int) * (size_t)(p->n_docs > 0 ? p->n_docs : 1));
    if (!order) return false;
    if (w->embedder) {   /* the question's and the chunks' vectors, each text embedded once */
        bool filled = rp_retrieve_embed_fill(w->embedder, w->emb_model, w->emb, &question, 1) &&
                      rp_retrieve_embed_fill(w->embedder, w->emb_model, w->emb, (const char *const *)chunks, n_chunks);
        if (!filled) { free(order); return false; }
    }
    const int k = rp_retrieve(question, (const char *const *)chunks, n_chunks, p->n_docs, w->emb, order);
    if (k < 0) { free(order); return false; }
    if (w->texts) {
        note_text(w->texts, w->seen, question);
        for (int i = 0; i < n_chunks; i++) note_text(w->texts, w->seen, chunks[i]);
    }
    if (!warm) n_warm = k;   /* cache just the retrieved chunks */
    rp_token bos = rp_token_bos(m);
    bool use_bos = bos >= 0 && adds_bos(m);
    rp_token *sys_t = NULL, *q_t = NULL, *c_t[64] = {0};
    int32_t sys_n = 0, q_n = 0, c_n[64] = {0};
    char *head_s = NULL, *tail_s = NULL;
    bool special = false;
    bool ok = k <= 64 && n_warm <= 64 && prompt_texts(m, p, system, question, &head_s, &tail_s, &special) &&
              tokenize_ex(m, head_s, special, &sys_t, &sys_n) && tokenize_ex(m, tail_s, special, &q_t, &q_n);
    free(head_s);
    free(tail_s);
    /* c_t[0..k) are the retrieved chunks' tokens; the warm-ups' come next when they differ */
    for (int i = 0; ok && i < k; i++) ok = tokenize(m, chunks[order[i]], &c_t[i], &c_n[i]);
    rp_query *q = ok ? new_query(w, n_warm) : NULL;
    if (q) {
        q->retrieved = order;
        q->n_retrieved = k;
        order = NULL;
    }
    seg segs[72];
    if (q) {
        /* BOS + system is one segment, so the system prompt is a shared prefix chunk */
        rp_token *head = malloc(sizeof(rp_token) * (size_t)(sys_n + 1));
        int32_t hn = 0;
        if (!head) ok = false;
        if (ok) {
            if (use_bos) head[hn++] = bos;
            memcpy(head + hn, sys_t, sizeof(rp_token) * (size_t)sys_n);
            hn += sys_n;
            for (int i = 0; ok && i < n_warm; i++) {
                rp_token *t = NULL;
                int32_t tn = 0;
                if (warm) ok = tokenize(m, chunks[warm[i]], &t, &tn);
                int ns = 0;
                segs[ns++] = (seg){head, hn};
                segs[ns++] = warm ? (seg){t, tn} : (seg){c_t[i], c_n[i]};
                ok = ok && make_prompt(segs, ns, p->max_tokens, &q->warm[q->n_warm]);
                if (ok) note_len(w, &q->warm[q->n_warm++]);
                free(t);
            }
            int ns = 0;
            segs[ns++] = (seg){head, hn};
            /* cap each chunk so the prompt fits */
            int32_t room = p->max_tokens - hn - q_n, per = k > 0 ? room / k : 0;
            for (int i = 0; i < k; i++) segs[ns++] = (seg){c_t[i], c_n[i] < per ? c_n[i] : per};
            segs[ns++] = (seg){q_t, q_n};
            ok = ok && make_prompt(segs, ns, p->max_tokens, &q->prompt);
            if (ok) note_len(w, &q->prompt);
            if (answer) q->answer = strdup(answer);
        }
        free(head);
    }
    for (int i = 0; i < 64; i++) free(c_t[i]);
    free(order);
    free(sys_t);
    free(q_t);
    return ok && q;
}

/* A dataset file: --data as is when it names a file, joined with the dataset's
 * relative path when it names a directory (as `bench all --data DIR` passes
 * it to every step), else under ../shared/data. */
static const char *data_path(const char *data, const char *rel, char *buf, size_t cap) {
    struct stat sb;
    if (data && stat(data, &sb) == 0 && S_ISDIR(sb.st_mode)) snprintf(buf, cap, "%s/%s", data, rel);
    else if (data) snprintf(buf, cap, "%s", data);
    else {
        const char *dir = getenv("RP_SHARED_DIR");
        snprintf(buf, cap, "%s/data/%s", dir && *dir ? dir : "../shared", rel);
    }
    return buf;
}

static int chunk_chars(const rp_workload_params *p) { return p->doc_len > 0 ? p->doc_len : 1024; }

/* Appends s to the growing string *all. */
static bool append(char **all, size_t *len, size_t *cap, const char *s) {
    const size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t nc = *cap * 2 + n + 1;
        char *na = realloc(*all, nc);
        if (!na) return false;
        *all = na;
        *cap = nc;
    }
    memcpy(*all + *len, s, n + 1);
    *len += n;
    return true;
}

/* One doc QA example: its context split into chunks, every chunk cached
 * (warm-ups), the top k in the prompt. */
static bool docqa_example(rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *context,
                          const char *question, const char *answer) {
    static const char *system = "Answer the question based on the given passages. Answer within 5 words.\n\n";
    char *chunks[64];
    int warm[64];
    const int nc = split_chars(context, chunk_chars(p), chunks, 64);
    for (int c = 0; c < nc; c++) warm[c] = c;
    bool ok = question && add_retrieval_query(w, m, p, system, chunks, nc, warm, nc, question, answer);
    for (int c = 0; c < nc; c++) free(chunks[c]);
    return ok;
}

static bool build_docqa(const char *cmd, rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *data) {
    const bool musique = p->source && !strcmp(p->source, "musique");
    if (p->source && !musique && strcmp(p->source, "hotpotqa")) {
        fprintf(stderr, "reprise %s: unknown --source '%s' (hotpotqa, musique)\n", cmd, p->source);
        return false;
    }
    char path[4096];
    data_path(data, musique ? "cacheblend/musique_s.json" : "hotpotqa/hotpot_dev_distractor_first100.json", path, sizeof path);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root || !json_is_array(root)) {
        fprintf(stderr, "reprise %s: cannot read %s from '%s': %s (pass --data FILE or DIR)\n", cmd,
                musique ? "MuSiQue" : "HotpotQA", path, root ? "not an array" : err.text);
        json_decref(root);
        return false;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(root) && w->n_q < p->n_queries; i++) {
        json_t *ex = json_array_get(root, i);
        size_t cap = 1 << 16, len = 0;
        char *all = malloc(cap);
        if (!all) { ok = false; break; }
        all[0] = 0;
        const char *answer;
        if (musique) {   /* {question, answers: [..], ctxs: [{title, text}]}: passages, one a line */
            json_t *ctxs = json_object_get(ex, "ctxs");
            for (size_t t = 0; ok && t < json_array_size(ctxs); t++) {
                const char *tx = json_string_value(json_object_get(json_array_get(ctxs, t), "text"));
                ok = !tx || (append(&all, &len, &cap, tx) && append(&all, &len, &cap, "\n"));
            }
            answer = json_string_value(json_array_get(json_object_get(ex, "answers"), 0));
        } else {         /* {question, answer, context: {title[], sentences[][]}}: "title: sentences" paragraphs */
            json_t *ctx = json_object_get(ex, "context");
            json_t *titles = json_object_get(ctx, "title"), *sents = json_object_get(ctx, "sentences");
            for (size_t t = 0; ok && t < json_array_size(titles); t++) {
                const char *ti = json_string_value(json_array_get(titles, t));
                ok = append(&all, &len, &cap, ti ? ti : "") && append(&all, &len, &cap, ": ");
                json_t *ss = json_array_get(sents, t);
                for (size_t k = 0; ok && k < json_array_size(ss); k++) {
                    const char *sx = json_string_value(json_array_get(ss, k));
                    ok = !sx || append(&all, &len, &cap, sx);
                }
                ok = ok && append(&all, &len, &cap, "\n");
            }
            answer = json_string_value(json_object_get(ex, "answer"));
        }
        ok = ok && docqa_example(w, m, p, all, json_string_value(json_object_get(ex, "question")), answer);
        free(all);
    }
    json_decref(root);
    return ok;
}

static bool build_chat(const char *cmd, rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *data) {
    char path[4096];
    data_path(data, "locomo/26.json", path, sizeof path);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root) {
        fprintf(stderr, "reprise %s: cannot read LoCoMo from '%s': %s (pass --data FILE or DIR)\n", cmd, path, err.text);
        return false;
    }
    /* the whole history as "Speaker: text" lines, session by session */
    json_t *conv = json_object_get(root, "conversation");
    if (!conv) conv = root;
    size_t cap = 1 << 20, len = 0;
    char *all = malloc(cap);
    bool ok = all != NULL;
    if (all) all[0] = 0;
    for (int s = 1; ok && s < 100; s++) {
        char key[32];
        snprintf(key, sizeof key, "session_%d", s);
        json_t *sess = json_object_get(conv, key);
        for (size_t t = 0; ok && t < json_array_size(sess); t++) {
            json_t *turn = json_array_get(sess, t);
            const char *spk = json_string_value(json_object_get(turn, "speaker")), *tx = json_string_value(json_object_get(turn, "text"));
            if (!spk || !tx) continue;
            ok = append(&all, &len, &cap, spk) && append(&all, &len, &cap, ": ") && append(&all, &len, &cap, tx) &&
                 append(&all, &len, &cap, "\n");
        }
    }
    enum { MAX_CHUNKS = 4096 };
    char **chunks = ok ? calloc(MAX_CHUNKS, sizeof *chunks) : NULL;
    int nc = chunks ? split_chars(all, chunk_chars(p), chunks, MAX_CHUNKS) : 0;
    free(all);
    const char *system = "Below are excerpts of a long chat history. Answer the question about it.\n\n";
    json_t *qa = json_object_get(root, "qa");
    ok = chunks != NULL;
    for (size_t i = 0; ok && i < json_array_size(qa) && w->n_q < p->n_queries; i++) {
        json_t *item = json_array_get(qa, i);
        const char *question = json_string_value(json_object_get(item, "question"));
        json_t *ans = json_object_get(item, "answer");
        char abuf[256] = "";
        if (json_is_string(ans)) snprintf(abuf, sizeof abuf, "%s", json_string_value(ans));
        else if (json_is_integer(ans)) snprintf(abuf, sizeof abuf, "%lld", (long long)json_integer_value(ans));
        if (!question) continue;
        /* the top k over the whole history; the warm-ups cache those chunks (the history is the database) */
        ok = add_retrieval_query(w, m, p, system, chunks, nc, NULL, 0, question, abuf);
    }
    for (int c = 0; c < nc; c++) free(chunks[c]);
    free(chunks);
    json_decref(root);
    return ok;
}

static bool build_skills(const char *cmd, rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *data) {
    char path[4096];
    data_path(data, "skillsbench/skillsbench_tasks.jsonl", path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "reprise %s: cannot read SkillsBench from '%s' (pass --data PATH)\n", cmd, path);
        return false;
    }
    const char *system = "You are an agent. Use the skills below to complete the task.\n\n";
    rp_token bos = rp_token_bos(m);
    bool use_bos = bos >= 0 && adds_bos(m);
    char *line = NULL;
    size_t lcap = 0;
    bool ok = true;
    while (ok && w->n_q < p->n_queries && getline(&line, &lcap, f) > 0) {
        json_t *t = json_loads(line, 0, NULL);
        if (!t) continue;
        json_t *skills = json_object_get(t, "skills");
        const char *instr = json_string_value(json_object_get(t, "instruction"));
        rp_token *seg_t[10] = {0};
        int32_t seg_n[10] = {0};
        int nsk = 0;
        for (size_t k = 0; ok && k < json_array_size(skills) && nsk < 8; k++) {
            const char *md = json_string_value(json_object_get(json_array_get(skills, k), "skill_md"));
            if (!md) continue;
            ok = tokenize(m, md, &seg_t[nsk], &seg_n[nsk]);
            nsk++;
        }
        /* long skill files are cut evenly so system + skills + task fit in max_tokens */
        int32_t per = nsk > 0 ? (p->max_tokens - 160) / nsk : 0;
        for (int k = 0; k < nsk; k++)
            if (seg_n[k] > per) seg_n[k] = per;
        rp_token *sys_t = NULL, *in_t = NULL, *alt_t = NULL;
        int32_t sys_n = 0, in_n = 0, alt_n = 0;
        char ibuf[8192];
        snprintf(ibuf, sizeof ibuf, "\n\nTask: %s\n", instr ? instr : "");
        if (ok && nsk > 0 && tokenize(m, system, &sys_t, &sys_n) && tokenize(m, ibuf, &in_t, &in_n) &&
            tokenize(m, "\n\nTask: list the steps you would take.\n", &alt_t, &alt_n)) {
            rp_token *head = malloc(sizeof(rp_token) * (size_t)(sys_n + 1));
            int32_t hn = 0;
            rp_query *q = head ? new_query(w, 1) : NULL;
            if (q) {
                if (use_bos) head[hn++] = bos;
                memcpy(head + hn, sys_t, sizeof(rp_token) * (size_t)sys_n);
                hn += sys_n;
                seg segs[12];
                int ns = 0;
                segs[ns++] = (seg){head, hn};
                for (int k = 0; k < nsk; k++) segs[ns++] = (seg){seg_t[k], seg_n[k]};
                segs[ns++] = (seg){alt_t, alt_n};   /* an earlier task that loaded the same skills */
                ok = make_prompt(segs, ns, p->max_tokens, &q->warm[0]);
                q->n_warm = 1;
                segs[ns - 1] = (seg){in_t, in_n};
                ok = ok && make_prompt(segs, ns, p->max_tokens, &q->prompt);
                if (ok) { note_len(w, &q->warm[0]); note_len(w, &q->prompt); }
            } else {
                ok = false;
            }
            free(head);
        }
        for (int k = 0; k < nsk; k++) free(seg_t[k]);
        free(sys_t);
        free(in_t);
        free(alt_t);
        json_decref(t);
    }
    free(line);
    fclose(f);
    return ok;
}

bool rp_workload_build(const char *cmd, const char *name, const char *data, const rp_model *m,
                       const rp_workload_params *p, rp_workload **out) {
    *out = NULL;
    rp_workload *w = calloc(1, sizeof *w);
    if (!w) return false;
    bool ok = true;
    rp_workload_params sp = *p;   /* synthetic documents are counted in tokens */
    if (sp.doc_len <= 0) sp.doc_len = 320;
    const bool text = !strcmp(name, "docqa") || !strcmp(name, "chat");
    if (text && p->embeddings && p->retrieve_model) {
        fprintf(stderr, "reprise %s: --embeddings and --retrieve-model both give retrieval vectors: choose one\n", cmd);
        ok = false;
    } else if (text && p->embeddings) {
        json_error_t err;
        w->emb = json_load_file(p->embeddings, 0, &err);
        if (!json_is_object(w->emb)) {
            fprintf(stderr, "reprise %s: --embeddings '%s': %s\n", cmd, p->embeddings,
                    w->emb ? "not a JSON object of text -> vector" : err.text);
            ok = false;
        }
    }
    if (text && p->retrieve_model && ok) {
        rp_embedder_params ep = rp_embedder_default_params();
        if (rp_model_load(p->retrieve_model, rp_model_default_params(), &w->emb_model) != RP_OK ||
                   rp_embedder_create(w->emb_model, &ep, &w->embedder) != RP_OK) {
            fprintf(stderr, "reprise %s: --retrieve-model '%s': %s\n", cmd, p->retrieve_model, rp_last_error());
            ok = false;
        } else if (!(w->emb = json_object())) {
            ok = false;
        }
    }
    if (text && p->export_texts) {
        w->texts = json_array();
        w->seen = json_object();
    }
    if (!ok) ;
    else if (!strcmp(name, "synthetic")) ok = build_synthetic(w, m, &sp, false);
    else if (!strcmp(name, "repeat")) ok = build_synthetic(w, m, &sp, true);
    else if (!strcmp(name, "docqa")) ok = build_docqa(cmd, w, m, p, data);
    else if (!strcmp(name, "chat")) ok = build_chat(cmd, w, m, p, data);
    else if (!strcmp(name, "skills")) ok = build_skills(cmd, w, m, p, data);
    else {
        fprintf(stderr, "reprise %s: unknown workload '%s' (synthetic, repeat, docqa, chat, skills)\n", cmd, name);
        ok = false;
    }
    if (ok && w->texts && json_dump_file(w->texts, p->export_texts, JSON_INDENT(1)) != 0) {
        fprintf(stderr, "reprise %s: cannot write '%s'\n", cmd, p->export_texts);
        ok = false;
    }
    if (ok && w->n_q == 0) {
        fprintf(stderr, "reprise %s: workload '%s' produced no queries\n", cmd, name);
        ok = false;
    }
    if (!ok) {
        rp_workload_free(w);
        return false;
    }
    *out = w;
    return true;
}

static void free_prompt(rp_wprompt *p) {
    free(p->toks);
    free(p->bounds);
}

void rp_workload_free(rp_workload *w) {
    if (!w) return;
    for (int i = 0; i < w->n_q; i++) {
        for (int k = 0; k < w->q[i].n_warm; k++) free_prompt(&w->q[i].warm[k]);
        free(w->q[i].warm);
        free_prompt(&w->q[i].prompt);
        free(w->q[i].answer);
        free(w->q[i].retrieved);
    }
    json_decref(w->emb);
    rp_embedder_free(w->embedder);
    rp_model_free(w->emb_model);
    json_decref(w->texts);
    json_decref(w->seen);
    free(w->q);
    free(w);
}

int rp_workload_n_queries(const rp_workload *w) { return w->n_q; }
const rp_query *rp_workload_query(const rp_workload *w, int i) { return &w->q[i]; }
int32_t rp_workload_max_tokens(const rp_workload *w) { return w->max_tokens; }
