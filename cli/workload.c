/* workload.c — reuse workloads: synthetic documents, repeated prompts, HotpotQA doc-QA, LoCoMo chat, SkillsBench skills. */
#include "workload.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

struct rp_workload {
    rp_query *q;
    int n_q, cap_q;
    int32_t max_tokens;
};

rp_workload_params rp_workload_default_params(void) {
    rp_workload_params p = {.n_queries = 8, .n_docs = 6, .doc_len = 320, .tail_len = 40, .max_tokens = 3072, .seed = 1};
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

static void note_len(rp_workload *w, const rp_wprompt *p) {
    if (p->n > w->max_tokens) w->max_tokens = p->n;
}

/* Tokens of a text (no BOS, special-token texts not parsed: data is data). */
static bool tokenize(const rp_tokenizer *tok, const char *text, rp_token **out, int32_t *n) {
    size_t len = strlen(text), cap = len + 8, got = 0;
    *out = malloc(sizeof(rp_token) * cap);
    if (!*out) return false;
    rp_tokenize_opts o = {.add_bos = false, .parse_special = false};
    if (rp_tokenizer_encode(tok, text, len, o, *out, cap, &got) != RP_OK) return false;
    *n = (int32_t)got;
    return true;
}

/* ---- synthetic: random-token documents, reused in a new order ---- */

static bool build_synthetic(rp_workload *w, const rp_model *m, const rp_workload_params *p, bool repeat) {
    uint64_t s = p->seed * 0x9e3779b97f4a7c15ULL + 1;
    const int pool = p->n_docs * 4;
    const int32_t V = m->hp.n_vocab;
    /* token ids from the middle of the vocabulary (ordinary pieces, not specials / bytes) */
    int32_t lo = V > 1024 ? 300 : 3, hi = V > 1024 ? (V < 30000 ? V - 100 : 30000) : V;
    rp_token **docs = calloc((size_t)pool, sizeof *docs);
    rp_token *tail = malloc(sizeof(rp_token) * (size_t)p->tail_len);
    rp_token bos = rp_tokenizer_bos(m->tok);
    if (!docs || !tail) return false;
    for (int d = 0; d < pool; d++) {
        docs[d] = malloc(sizeof(rp_token) * (size_t)p->doc_len);
        if (!docs[d]) return false;
        for (int i = 0; i < p->doc_len; i++) docs[d][i] = lo + (rp_token)(rng(&s) % (uint64_t)(hi - lo));
    }
    seg segs[70];
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
        for (int i = 0; i < p->n_docs; i++) segs[ns++] = (seg){docs[pick[i]], p->doc_len};
        segs[ns++] = (seg){tail, p->tail_len};
        if (!make_prompt(segs, ns, p->max_tokens, &q->prompt)) return false;
        if (repeat && !make_prompt(segs, ns, p->max_tokens, &q->warm[0])) return false;   /* exactly the same prompt */
        note_len(w, &q->warm[0]);
        note_len(w, &q->prompt);
    }
    for (int d = 0; d < pool; d++) free(docs[d]);
    free(docs);
    free(tail);
    return true;
}

/* ---- text retrieval: keyword overlap (idf-weighted) ---- */

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

/* score of a chunk for a question: sum over distinct question words present in the chunk */
static double overlap(const char *question, const char *chunk) {
    static char qw[128][24];
    int nq = lower_words(question, qw, 128);
    double sc = 0;
    for (int i = 0; i < nq; i++) {
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = !strcmp(qw[i], qw[j]);
        if (dup) continue;
        /* case-insensitive substring test with word-ish boundaries */
        size_t L = strlen(qw[i]);
        for (const char *c = chunk; *c; c++) {
            size_t k = 0;
            while (k < L && c[k] && tolower((unsigned char)c[k]) == qw[i][k]) k++;
            if (k == L && (c == chunk || !isalnum((unsigned char)c[-1]))) {
                sc += 1.0 + (double)L / 8.0;   /* longer words are rarer */
                break;
            }
        }
    }
    return sc;
}

typedef struct text_chunk {
    char *text;
    double score;
    int idx;
} text_chunk;

static int by_score(const void *a, const void *b) {
    const text_chunk *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->idx - y->idx;
}

/* Splits text into ~target-character chunks at sentence / line ends. */
static int split_chars(const char *text, int target, text_chunk *out, int cap) {
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
        out[n].text = strndup(text + pos, end - pos);
        out[n].idx = n;
        out[n].score = 0;
        if (!out[n].text) break;
        n++;
        pos = end;
    }
    return n;
}

/* Query from retrieved text chunks: warm-up caches each chunk after the
 * system text (the document database); the prompt is system + top-k chunks in
 * retrieval order + the question. */
static bool add_retrieval_query(rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *system,
                                text_chunk *chunks, int n_chunks, const char *question, const char *answer) {
    for (int i = 0; i < n_chunks; i++) chunks[i].score = overlap(question, chunks[i].text);
    qsort(chunks, (size_t)n_chunks, sizeof *chunks, by_score);
    int k = n_chunks < p->n_docs ? n_chunks : p->n_docs;
    rp_token bos = rp_tokenizer_bos(m->tok);
    bool use_bos = bos >= 0 && rp_tokenizer_add_bos(m->tok);
    rp_token *sys_t = NULL, *q_t = NULL, **c_t = calloc((size_t)n_chunks, sizeof *c_t);
    int32_t sys_n = 0, q_n = 0, *c_n = calloc((size_t)n_chunks, sizeof *c_n);
    char qbuf[4096];
    snprintf(qbuf, sizeof qbuf, "\n\nQuestion: %s\nAnswer:", question);
    bool ok = c_t && c_n && tokenize(m->tok, system, &sys_t, &sys_n) && tokenize(m->tok, qbuf, &q_t, &q_n);
    for (int i = 0; ok && i < n_chunks; i++) ok = tokenize(m->tok, chunks[i].text, &c_t[i], &c_n[i]);
    rp_query *q = ok ? new_query(w, n_chunks) : NULL;
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
            for (int i = 0; ok && i < n_chunks; i++) {
                int ns = 0;
                segs[ns++] = (seg){head, hn};
                segs[ns++] = (seg){c_t[i], c_n[i]};
                ok = make_prompt(segs, ns, p->max_tokens, &q->warm[q->n_warm]);
                if (ok) note_len(w, &q->warm[q->n_warm++]);
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
    for (int i = 0; c_t && i < n_chunks; i++) free(c_t[i]);
    free(c_t);
    free(c_n);
    free(sys_t);
    free(q_t);
    return ok && q;
}

static const char *data_path(const char *data, const char *rel, char *buf, size_t cap) {
    if (data) {
        snprintf(buf, cap, "%s", data);
        return buf;
    }
    const char *dir = getenv("RP_SHARED_DIR");
    snprintf(buf, cap, "%s/data/%s", dir && *dir ? dir : "../shared", rel);
    return buf;
}

static bool build_docqa(const char *cmd, rp_workload *w, const rp_model *m, const rp_workload_params *p, const char *data) {
    char path[4096];
    data_path(data, "hotpotqa/hotpot_dev_distractor_first100.json", path, sizeof path);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!root || !json_is_array(root)) {
        fprintf(stderr, "reprise %s: cannot read HotpotQA from '%s': %s (pass --data PATH)\n", cmd, path, root ? "not an array" : err.text);
        json_decref(root);
        return false;
    }
    const char *system = "Answer the question based on the given passages. Answer within 5 words.\n\n";
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(root) && w->n_q < p->n_queries; i++) {
        json_t *ex = json_array_get(root, i), *ctx = json_object_get(ex, "context");
        json_t *titles = json_object_get(ctx, "title"), *sents = json_object_get(ctx, "sentences");
        size_t cap = 1 << 16, len = 0;
        char *all = malloc(cap);
        if (!all) return false;
        all[0] = 0;
        for (size_t t = 0; t < json_array_size(titles); t++) {
            char para[8192];
            size_t pl = (size_t)snprintf(para, sizeof para, "%s: ", json_string_value(json_array_get(titles, t)));
            json_t *ss = json_array_get(sents, t);
            for (size_t k = 0; k < json_array_size(ss) && pl < sizeof para - 2; k++)
                pl += (size_t)snprintf(para + pl, sizeof para - pl, "%s", json_string_value(json_array_get(ss, k)));
            if (pl >= sizeof para) pl = sizeof para - 2;
            para[pl++] = '\n';
            para[pl] = 0;
            if (len + pl + 1 > cap) {
                char *na = realloc(all, cap * 2 + pl);
                if (!na) { free(all); return false; }
                all = na;
                cap = cap * 2 + pl;
            }
            memcpy(all + len, para, pl + 1);
            len += pl;
        }
        text_chunk chunks[64];
        int nc = split_chars(all, 1024, chunks, 64);
        free(all);
        ok = add_retrieval_query(w, m, p, system, chunks, nc, json_string_value(json_object_get(ex, "question")),
                                 json_string_value(json_object_get(ex, "answer")));
        for (int c = 0; c < nc; c++) free(chunks[c].text);
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
        fprintf(stderr, "reprise %s: cannot read LoCoMo from '%s': %s (pass --data PATH)\n", cmd, path, err.text);
        return false;
    }
    /* the whole history as "Speaker: text" lines, session by session */
    size_t cap = 1 << 20, len = 0;
    char *all = malloc(cap);
    if (!all) return false;
    all[0] = 0;
    for (int s = 1; s < 100; s++) {
        char key[32];
        snprintf(key, sizeof key, "session_%d", s);
        json_t *sess = json_object_get(root, key);
        if (!sess) continue;
        for (size_t t = 0; t < json_array_size(sess); t++) {
            json_t *turn = json_array_get(sess, t);
            const char *spk = json_string_value(json_object_get(turn, "speaker")), *tx = json_string_value(json_object_get(turn, "text"));
            if (!spk || !tx) continue;
            size_t need = strlen(spk) + strlen(tx) + 4;
            if (len + need + 1 > cap) {
                char *na = realloc(all, cap * 2);
                if (!na) { free(all); json_decref(root); return false; }
                all = na;
                cap *= 2;
            }
            len += (size_t)sprintf(all + len, "%s: %s\n", spk, tx);
        }
    }
    text_chunk *chunks = calloc(2048, sizeof *chunks);
    int nc = chunks ? split_chars(all, 1024, chunks, 2048) : 0;
    free(all);
    const char *system = "Below are excerpts of a long chat history. Answer the question about it.\n\n";
    json_t *qa = json_object_get(root, "qa");
    bool ok = chunks != NULL;
    for (size_t i = 0; ok && i < json_array_size(qa) && w->n_q < p->n_queries; i++) {
        json_t *item = json_array_get(qa, i);
        const char *question = json_string_value(json_object_get(item, "question"));
        json_t *ans = json_object_get(item, "answer");
        char abuf[256] = "";
        if (json_is_string(ans)) snprintf(abuf, sizeof abuf, "%s", json_string_value(ans));
        else if (json_is_integer(ans)) snprintf(abuf, sizeof abuf, "%lld", (long long)json_integer_value(ans));
        if (!question) continue;
        /* score all chunks, keep the top 3k as this query's database (the history's relevant part) */
        for (int c = 0; c < nc; c++) chunks[c].idx = c;
        ok = add_retrieval_query(w, m, p, system, chunks, nc < 3 * p->n_docs ? nc : 3 * p->n_docs, question, abuf);
        qsort(chunks, (size_t)nc, sizeof *chunks, by_score);
    }
    for (int c = 0; c < nc; c++) free(chunks[c].text);
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
    rp_token bos = rp_tokenizer_bos(m->tok);
    bool use_bos = bos >= 0 && rp_tokenizer_add_bos(m->tok);
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
            ok = tokenize(m->tok, md, &seg_t[nsk], &seg_n[nsk]);
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
        if (ok && nsk > 0 && tokenize(m->tok, system, &sys_t, &sys_n) && tokenize(m->tok, ibuf, &in_t, &in_n) &&
            tokenize(m->tok, "\n\nTask: list the steps you would take.\n", &alt_t, &alt_n)) {
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
    bool ok;
    if (!strcmp(name, "synthetic")) ok = build_synthetic(w, m, p, false);
    else if (!strcmp(name, "repeat")) ok = build_synthetic(w, m, p, true);
    else if (!strcmp(name, "docqa")) ok = build_docqa(cmd, w, m, p, data);
    else if (!strcmp(name, "chat")) ok = build_chat(cmd, w, m, p, data);
    else if (!strcmp(name, "skills")) ok = build_skills(cmd, w, m, p, data);
    else {
        fprintf(stderr, "reprise %s: unknown workload '%s' (synthetic, repeat, docqa, chat, skills)\n", cmd, name);
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
    }
    free(w->q);
    free(w);
}

int rp_workload_n_queries(const rp_workload *w) { return w->n_q; }
const rp_query *rp_workload_query(const rp_workload *w, int i) { return &w->q[i]; }
int32_t rp_workload_max_tokens(const rp_workload *w) { return w->max_tokens; }
