/* vk_offload.c — the last layers of a model on the GPU for any forward call, and the sequences' GPU KV cells
 * (gpu_offload.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "gpu/gpu.h"
#include "gpu/gpu_offload.h"
#include "gpu/gpu_ops.h"
#include "kv/kv.h"
#include "model/forward.h"
#include "model/model.h"
#include "gpu/vk_weights.h"

struct rp_gpu_offload {
    rp_gpu *g;
    const rp_model *m;
    rp_gpu_ops *ops;
    int32_t first, n_gl;         /* layers [first, n_layer) are here; n_gl of them */
    bool out_on_gpu;
    glayer *layers;              /* [n_gl] */
    gweight output;
    rp_gpu_buf *out_norm;
};

struct rp_gpu_kv {
    rp_gpu_offload *o;
    rp_gpu_buf *buf[2];          /* K, V: [n_gl][n_ctx][row_bytes]: kv_dim halves, or its Q8_0 blocks */
    int32_t n_ctx;
    rp_type type;                /* RP_TYPE_F16 or RP_TYPE_Q8_0 */
    size_t row_bytes;            /* kv_dim halves, or kv_dim / 32 Q8_0 blocks of 34 bytes */
    rp_status err;               /* sticky: a failed transfer in a void accessor */
    char why[256];
};

#define MAX_RUNS_PER_REC 64      /* recorder sized for this many sequence runs per layer; more: several submits */

struct rp_gpu_fwd {
    rp_gpu_offload *o;
    rp_gpu_rec *rec;
    int32_t cap_rows, cap_out, cap_disp, n_disp;
    /* activations (device) */
    rp_gpu_buf *x, *xb, *xn, *q, *k, *v, *att, *gate, *up;
    /* per call, written by the host (host-visible memory) */
    rp_gpu_buf *cells, *n_cells, *cs, *logits, *x_host, *xo_host;
    int32_t *runs;               /* [3 * cap_rows] (first row, rows, sequence) */
    int32_t *host_i;             /* [cap_rows] */
};

/* ---- the plan: which layers can go, and the start-up line ---- */

static const char *type_name(rp_type t) {
    const rp_type_traits *tr = rp_type_get_traits((int)t);
    return tr ? tr->name : "?";
}

/* Why the architecture cannot run on the GPU kernels, or NULL. */
static const char *arch_gap(const rp_model *m) {
    const rp_hparams *hp = &m->hp;
    if (hp->arch != RP_ARCH_LLAMA && hp->arch != RP_ARCH_QWEN3) return "the GPU forward covers llama and qwen3 only";
    if (hp->head_dim > 256 || hp->head_dim % 2 || hp->n_head % hp->n_head_kv || hp->n_rot > hp->head_dim)
        return "its heads do not fit the GPU attention (head_dim <= 256, even)";
    if (hp->ffn_gelu || hp->post_norms || hp->attn_softcap > 0 || hp->final_softcap > 0 || hp->n_swa > 0)
        return "its layers need GeGLU / post-norms / soft-capping / a sliding window (no GPU kernels yet)";
    for (int32_t l = 0; l < hp->n_layer; l++)
        if (m->layers[l].bq || m->layers[l].window > 0 || m->layers[l].rope_local)
            return "its layers need biases or local attention (no GPU kernels yet)";
    return NULL;
}

/* The first layer from `first` on whose weights all have GPU kernels, every layer after it too; `why` names the
 * last tensor that kept layers on the CPU. */
static int32_t first_possible(const rp_model *m, int32_t first, char *why, size_t cap) {
    static const char *names[7] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    for (int32_t l = m->hp.n_layer - 1; l >= first; l--) {
        const rp_layer *L = &m->layers[l];
        const rp_weight *ws[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++)
            if (!rp_gpu_ops_has_type(ws[i]->type) || ws[i]->row_bytes > UINT32_MAX) {
                snprintf(why, cap, "blk.%d.%s is %s, which has no GPU kernel", l, names[i], type_name(ws[i]->type));
                return l + 1;
            }
    }
    return first;
}

/* Whether the machine has a GPU's device node at all (NVIDIA, DRM render nodes, Adreno, Mali). Without one the
 * default offload does not even open the Vulkan loader: only a CPU-type device could answer, and the default never
 * picks one, so a CPU-only machine (every test process, every CLI run) skips loading the drivers. */
static bool gpu_node_present(void) {
    static const char *nodes[] = {"/dev/nvidiactl", "/dev/nvidia0", "/dev/kgsl-3d0", "/dev/mali0", "/dev/dxg"};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++)
        if (access(nodes[i], F_OK) == 0) return true;
    char path[32];
    for (int i = 128; i < 136; i++) {
        snprintf(path, sizeof path, "/dev/dri/renderD%d", i);
        if (access(path, F_OK) == 0) return true;
    }
    return false;
}

/* ---- uploads ---- */

static rp_status up_weight(rp_gpu_offload *o, const rp_weight *w, gweight *out) {
    RP_TRY(rp_gpu_ops_prepare(o->ops, w->type));   /* the ops are shared by contexts on any thread */
    return rp_vkw_upload(o->g, w, out);
}

static rp_status up_floats(rp_gpu_offload *o, const float *src, size_t n, rp_gpu_buf **out) {
    return rp_vkw_floats(o->g, src, n, out);
}

static rp_status upload(rp_gpu_offload *o) {
    const rp_model *m = o->m;
    const size_t E = (size_t)m->hp.n_embd, HD = (size_t)m->hp.head_dim;
    RP_TRY(rp_gpu_ops_create(o->g, &o->ops));
    o->layers = calloc((size_t)o->n_gl, sizeof *o->layers);
    if (!o->layers) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    for (int32_t i = 0; i < o->n_gl; i++) {
        const rp_layer *L = &m->layers[o->first + i];
        glayer *G = &o->layers[i];
        RP_TRY(up_floats(o, L->attn_norm, E, &G->attn_norm));
        RP_TRY(up_floats(o, L->ffn_norm, E, &G->ffn_norm));
        if (L->q_norm) RP_TRY(up_floats(o, L->q_norm, HD, &G->q_norm));
        if (L->k_norm) RP_TRY(up_floats(o, L->k_norm, HD, &G->k_norm));
        RP_TRY(up_weight(o, &L->wq, &G->wq));
        RP_TRY(up_weight(o, &L->wk, &G->wk));
        RP_TRY(up_weight(o, &L->wv, &G->wv));
        RP_TRY(up_weight(o, &L->wo, &G->wo));
        RP_TRY(up_weight(o, &L->w_gate, &G->gate));
        RP_TRY(up_weight(o, &L->w_up, &G->up));
        RP_TRY(up_weight(o, &L->w_down, &G->down));
    }
    if (o->out_on_gpu) {
        RP_TRY(up_floats(o, m->out_norm, E, &o->out_norm));
        RP_TRY(up_weight(o, &m->output, &o->output));
    }
    return RP_OK;
}

rp_status rp_gpu_offload_create(const rp_model *m, int32_t n_layers, const char *device, rp_gpu_offload **out,
                                char *notice, size_t cap) {
    *out = NULL;
    char tmp[8];
    if (!notice || !cap) notice = tmp, cap = sizeof tmp;
    notice[0] = '\0';
    const int32_t NL = m->hp.n_layer;
    const char *env = getenv("RP_GPU_DEVICE");
    const bool named = (device && *device) || (env && *env);
    const bool asked = n_layers > 0 || named;   /* otherwise a GPU is used only when one is found */
    if (n_layers == 0) {
        snprintf(notice, cap, "gpu: off (0 layers offloaded): CPU only");
        return RP_OK;
    }
    const int32_t want = n_layers < 0 || n_layers > NL ? NL : n_layers;
    if (!asked && !gpu_node_present()) {
        snprintf(notice, cap, "gpu: CPU only (no GPU device node; a CPU-type Vulkan device such as lavapipe is used "
                              "only when asked for: -ngl, --device or $RP_GPU_DEVICE)");
        return RP_OK;
    }
    const char *gap = arch_gap(m);
    if (gap) {
        snprintf(notice, cap, "gpu: CPU only: %s (%s)", gap, rp_arch_name(m->hp.arch));
        return RP_OK;
    }
    rp_gpu_params gp = rp_gpu_default_params();
    gp.device = device;
    gp.no_cpu_default = n_layers < 0;   /* lavapipe only when asked: a device named or a layer count given */
    rp_gpu *g = NULL;
    rp_status st = rp_gpu_create(&gp, &g);
    if (st != RP_OK) {
        if (asked) return st;   /* the error names the device or what is missing */
        snprintf(notice, cap, "gpu: CPU only (%s)", rp_last_error());
        return RP_OK;
    }
    char why[160] = "";
    const int32_t first = first_possible(m, NL - want, why, sizeof why);
    const rp_gpu_desc *d = rp_gpu_device(g);
    if (first >= NL) {
        snprintf(notice, cap, "gpu: %s: CPU only: %s", d->name, why);
        rp_gpu_free(g);
        return RP_OK;
    }
    rp_gpu_offload *o = calloc(1, sizeof *o);
    if (!o) {
        rp_gpu_free(g);
        return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    }
    o->g = g;
    o->m = m;
    o->first = first;
    o->n_gl = NL - first;
    o->out_on_gpu = first == 0 && rp_gpu_ops_has_type(m->output.type) && m->output.row_bytes <= UINT32_MAX;
    st = upload(o);
    if (st != RP_OK) {
        char msg[400], name[256];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        snprintf(name, sizeof name, "%s", d->name);
        rp_gpu_offload_free(o);
        return rp_errorf(st, "gpu: uploading the weights to '%s': %s", name, msg);
    }
    int k = snprintf(notice, cap, "gpu: %s (%s%s): %d of %d layers on the GPU", d->name, d->kind,
                     d->shared_memory ? ", shared memory" : "", o->n_gl, NL);
    if (k > 0 && (size_t)k < cap) {
        if (first > 0) k += snprintf(notice + k, cap - (size_t)k, " (%d-%d), %d-%d on the CPU", first, NL - 1, 0,
                                     first - 1);
        if ((size_t)k < cap)
            k += snprintf(notice + k, cap - (size_t)k, "%s", o->out_on_gpu ? ", output head on the GPU"
                                                                            : ", output head on the CPU");
        if (why[0] && (size_t)k < cap) snprintf(notice + k, cap - (size_t)k, " (%s)", why);
    }
    *out = o;
    return RP_OK;
}

static void free_w(gweight *w) { rp_gpu_buf_free(w->b); }

void rp_gpu_offload_free(rp_gpu_offload *o) {
    if (!o) return;
    if (o->layers)
        for (int32_t i = 0; i < o->n_gl; i++) rp_vkw_layer_free(&o->layers[i]);
    free(o->layers);
    free_w(&o->output);
    rp_gpu_buf_free(o->out_norm);
    rp_gpu_ops_free(o->ops);
    rp_gpu_free(o->g);
    free(o);
}

int32_t rp_gpu_offload_first(const rp_gpu_offload *o) { return o->first; }
bool rp_gpu_offload_has_output(const rp_gpu_offload *o) { return o->out_on_gpu; }

/* ---- the sequences' KV cells ---- */

rp_status rp_gpu_kv_create(rp_gpu_offload *o, int32_t n_ctx, rp_type type, rp_gpu_kv **out) {
    *out = NULL;
    const size_t KD = (size_t)o->m->hp.n_head_kv * (size_t)o->m->hp.head_dim;
    if (type != RP_TYPE_F16 && type != RP_TYPE_Q8_0)
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: the GPU layers' KV cache is f16 or q8_0 (use --kv-type f16 / q8_0, "
                                             "or -ngl 0 / --no-gpu for an f32 cache)");
    if (type == RP_TYPE_Q8_0 && (KD % 32 || KD > 8192))
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: a q8_0 KV cache on the GPU needs n_head_kv * head_dim a multiple "
                                             "of 32 (<= 8192); this model has %d x %d: use --kv-type f16",
                         o->m->hp.n_head_kv, o->m->hp.head_dim);
    const size_t row_bytes = type == RP_TYPE_Q8_0 ? KD / 32 * 34 : KD * 2;
    const size_t bytes = (size_t)o->n_gl * (size_t)n_ctx * row_bytes;
    /* F16 offsets are in halves, Q8_0 ones in bytes: both 32-bit in the kernels */
    if ((type == RP_TYPE_Q8_0 ? bytes : bytes / 2) > UINT32_MAX)
        return rp_errorf(RP_ERR_UNSUPPORTED, "gpu: a KV cache of %d cells x %d GPU layers exceeds the kernels' 32-bit "
                                             "offsets (lower -c or -ngl)", n_ctx, o->n_gl);
    rp_gpu_kv *k = calloc(1, sizeof *k);
    if (!k) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    k->o = o;
    k->n_ctx = n_ctx;
    k->type = type;
    k->row_bytes = row_bytes;
    const size_t halves = bytes / 2;
    rp_status st = rp_gpu_buf_create(o->g, bytes, RP_GPU_MEM_DEVICE, &k->buf[0]);
    if (st == RP_OK) st = rp_gpu_buf_create(o->g, bytes, RP_GPU_MEM_DEVICE, &k->buf[1]);
    if (st != RP_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        rp_gpu_kv_free(k);
        return rp_errorf(st, "gpu: KV cache of %d cells (%zu MiB on the device): %s", n_ctx, (halves * 4) >> 20, msg);
    }
    *out = k;
    return RP_OK;
}

void rp_gpu_kv_free(rp_gpu_kv *k) {
    if (!k) return;
    rp_gpu_buf_free(k->buf[0]);
    rp_gpu_buf_free(k->buf[1]);
    free(k);
}

static size_t cell_off(const rp_gpu_kv *k, int32_t layer, int32_t cell) {
    return ((size_t)layer * (size_t)k->n_ctx + (size_t)cell) * k->row_bytes;
}

static void sticky(rp_gpu_kv *k, rp_status st) {
    if (st == RP_OK || k->err != RP_OK) return;
    k->err = st;
    snprintf(k->why, sizeof k->why, "%s", rp_last_error());
}

void rp_gpu_kv_read(rp_gpu_kv *k, int part, int32_t layer, int32_t cell0, int32_t n, void *dst) {
    if (n > 0) sticky(k, rp_gpu_buf_read(k->buf[part], cell_off(k, layer, cell0), dst, (size_t)n * k->row_bytes));
}

void rp_gpu_kv_write(rp_gpu_kv *k, int part, int32_t layer, int32_t cell0, int32_t n, const void *src) {
    if (n > 0) sticky(k, rp_gpu_buf_write(k->buf[part], cell_off(k, layer, cell0), src, (size_t)n * k->row_bytes));
}

void rp_gpu_kv_move(rp_gpu_kv *k, int part, int32_t layer, int32_t dst, int32_t src, int32_t n) {
    if (n <= 0 || dst == src) return;
    const size_t bytes = (size_t)n * k->row_bytes;
    uint8_t *map = rp_gpu_buf_map(k->buf[part]);
    if (map) {
        memmove(map + cell_off(k, layer, dst), map + cell_off(k, layer, src), bytes);
        return;
    }
    void *tmp = malloc(bytes);   /* a context shift: rare, not per token */
    if (!tmp) {
        sticky(k, rp_errorf(RP_ERR_NOMEM, "gpu: out of memory moving %d KV cells", n));
        return;
    }
    rp_gpu_kv_read(k, part, layer, src, n, tmp);
    rp_gpu_kv_write(k, part, layer, dst, n, tmp);
    free(tmp);
}

rp_status rp_gpu_kv_copy(rp_gpu_kv *dst, const rp_gpu_kv *src, int32_t n) {
    if (dst->o != src->o || dst->n_ctx < n || dst->type != src->type)
        return rp_errorf(RP_ERR_INVALID_ARG, "gpu: KV copy of %d cells between caches of other models or sizes", n);
    if (src->err != RP_OK) return rp_errorf(src->err, "%s", src->why);
    const size_t bytes = (size_t)n * src->row_bytes;
    void *tmp = NULL;
    for (int p = 0; p < 2; p++)
        for (int32_t l = 0; l < src->o->n_gl; l++) {
            uint8_t *sm = rp_gpu_buf_map(src->buf[p]), *dm = rp_gpu_buf_map(dst->buf[p]);
            if (sm && dm) {
                memcpy(dm + cell_off(dst, l, 0), sm + cell_off(src, l, 0), bytes);
                continue;
            }
            if (!tmp && !(tmp = malloc(bytes ? bytes : 1))) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
            rp_status st = rp_gpu_buf_read(src->buf[p], cell_off(src, l, 0), tmp, bytes);
            if (st == RP_OK) st = rp_gpu_buf_write(dst->buf[p], cell_off(dst, l, 0), tmp, bytes);
            if (st != RP_OK) {
                free(tmp);
                return st;
            }
        }
    free(tmp);
    dst->err = RP_OK;
    return RP_OK;
}

/* ---- a context's part ---- */

static rp_status fbuf(rp_gpu_fwd *f, size_t floats, rp_gpu_mem mem, rp_gpu_buf **out) {
    return rp_gpu_buf_create(f->o->g, (floats ? floats : 1) * sizeof(float), mem, out);
}

rp_status rp_gpu_fwd_create(rp_gpu_offload *o, int32_t n_batch, int32_t n_outputs, rp_gpu_fwd **out) {
    *out = NULL;
    rp_gpu_fwd *f = calloc(1, sizeof *f);
    if (!f) return rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    f->o = o;
    f->cap_rows = n_batch;
    f->cap_out = n_outputs;
    const rp_hparams *hp = &o->m->hp;
    const size_t B = (size_t)n_batch, E = (size_t)hp->n_embd, F = (size_t)hp->n_ff, HD = (size_t)hp->head_dim;
    const size_t QD = (size_t)hp->n_head * HD, KD = (size_t)hp->n_head_kv * HD;
    const int32_t runs = n_batch < MAX_RUNS_PER_REC ? n_batch : MAX_RUNS_PER_REC;
    f->cap_disp = o->n_gl * (14 + 4 * runs) + 4 + n_outputs;
    rp_status st = rp_gpu_rec_create(o->g, f->cap_disp, &f->rec);
    if (st == RP_OK) st = fbuf(f, B * E, RP_GPU_MEM_DEVICE, &f->x);
    if (st == RP_OK) st = fbuf(f, B * (E > QD ? E : QD), RP_GPU_MEM_DEVICE, &f->xb);
    if (st == RP_OK) st = fbuf(f, B * E, RP_GPU_MEM_DEVICE, &f->xn);
    if (st == RP_OK) st = fbuf(f, B * QD, RP_GPU_MEM_DEVICE, &f->q);
    if (st == RP_OK) st = fbuf(f, B * KD, RP_GPU_MEM_DEVICE, &f->k);
    if (st == RP_OK) st = fbuf(f, B * KD, RP_GPU_MEM_DEVICE, &f->v);
    if (st == RP_OK) st = fbuf(f, B * QD, RP_GPU_MEM_DEVICE, &f->att);
    if (st == RP_OK) st = fbuf(f, B * F, RP_GPU_MEM_DEVICE, &f->gate);
    if (st == RP_OK) st = fbuf(f, B * F, RP_GPU_MEM_DEVICE, &f->up);
    if (st == RP_OK) st = fbuf(f, B, RP_GPU_MEM_HOST, &f->cells);
    if (st == RP_OK) st = fbuf(f, B, RP_GPU_MEM_HOST, &f->n_cells);
    if (st == RP_OK) st = fbuf(f, B * (size_t)hp->n_rot, RP_GPU_MEM_HOST, &f->cs);
    if (st == RP_OK && o->out_on_gpu) st = fbuf(f, (size_t)n_outputs * (size_t)hp->n_vocab, RP_GPU_MEM_HOST, &f->logits);
    /* a discrete GPU's hidden state goes through host-visible buffers copied in the command buffer itself */
    if (st == RP_OK && !rp_gpu_buf_map(f->x)) st = fbuf(f, B * E, RP_GPU_MEM_HOST, &f->x_host);
    if (st == RP_OK && !rp_gpu_buf_map(f->xn) && o->out_on_gpu)
        st = fbuf(f, (size_t)n_outputs * E, RP_GPU_MEM_HOST, &f->xo_host);
    if (st == RP_OK) {
        f->runs = malloc(sizeof(int32_t) * 3 * B);
        f->host_i = malloc(sizeof(int32_t) * B);
        if (!f->runs || !f->host_i) st = rp_errorf(RP_ERR_NOMEM, "gpu: out of memory");
    }
    if (st != RP_OK) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        rp_gpu_fwd_free(f);
        return rp_errorf(st, "gpu: activation buffers for %d rows: %s", n_batch, msg);
    }
    *out = f;
    return RP_OK;
}

void rp_gpu_fwd_free(rp_gpu_fwd *f) {
    if (!f) return;
    rp_gpu_rec_free(f->rec);   /* waits for its last submission */
    rp_gpu_buf *bs[] = {f->x, f->xb, f->xn, f->q, f->k, f->v, f->att, f->gate, f->up, f->cells, f->n_cells, f->cs,
                        f->logits, f->x_host, f->xo_host};
    for (size_t i = 0; i < sizeof bs / sizeof bs[0]; i++) rp_gpu_buf_free(bs[i]);
    free(f->runs);
    free(f->host_i);
    free(f);
}

/* Room for k more dispatches in the open recording, else it is submitted and a new one begun (the buffers
 * persist between submissions, so a batch of many sequences just takes several). */
static rp_status room(rp_gpu_fwd *f, int32_t k) {
    if (f->n_disp + k <= f->cap_disp) return RP_OK;
    RP_TRY(rp_gpu_rec_submit(f->rec, NULL));
    RP_TRY(rp_gpu_rec_begin(f->rec));
    f->n_disp = 0;
    return RP_OK;
}

#define OP(expr) do { RP_TRY(room(f, 1)); RP_TRY(expr); f->n_disp++; } while (0)

static rp_status mm(rp_gpu_fwd *f, const gweight *w, rp_gpu_buf *x, uint32_t x_off, rp_gpu_buf *y, uint32_t y_off,
                    uint32_t n) {
    const rp_gpu_mm a = {.w = w->b, .x = x, .y = y, .wtype = w->type, .rows = w->rows, .cols = w->cols, .n = n,
                         .row_bytes = w->row_bytes, .x_off = x_off, .ldx = w->cols, .y_off = y_off, .ldy = w->rows};
    OP(rp_gpu_op_mul_mat(f->o->ops, f->rec, &a));
    return RP_OK;
}

/* Where GPU layer gl's cells start in a cache's buffers, in the kernels' units: halves (F16) or bytes (Q8_0). */
static uint32_t layer_units(const rp_gpu_kv *k, int32_t gl) {
    const size_t bytes = (size_t)gl * (size_t)k->n_ctx * k->row_bytes;
    return (uint32_t)(k->type == RP_TYPE_Q8_0 ? bytes : bytes / 2);
}

static rp_status record(rp_gpu_fwd *f, const rp_batch *b, rp_kv *const *kvs, int32_t n_runs, int32_t gl0,
                        int32_t gl1, bool head) {
    rp_gpu_offload *o = f->o;
    const rp_model *m = o->m;
    const rp_hparams *hp = &m->hp;
    rp_gpu_ops *ops = o->ops;
    rp_gpu_rec *r = f->rec;
    const uint32_t n = (uint32_t)b->n, E = (uint32_t)hp->n_embd, H = (uint32_t)hp->n_head;
    const uint32_t HK = (uint32_t)hp->n_head_kv, HD = (uint32_t)hp->head_dim, R = (uint32_t)hp->n_rot;
    const uint32_t KD = HK * HD, QD = H * HD, F = (uint32_t)hp->n_ff;
    const bool neox = hp->rope_kind == RP_ROPE_NEOX;
    const float scale = rp_model_attn_scale(m);
    if (f->x_host) RP_TRY(rp_gpu_rec_copy(r, f->x_host, 0, f->x, 0, sizeof(float) * (size_t)n * E));
    for (int32_t gl = gl0; gl < gl1; gl++) {
        const glayer *G = &o->layers[gl];
        /* x += the previous layer's FFN output (xb), then xb = norm(x) */
        OP(rp_gpu_op_rmsnorm(ops, r, f->x, gl > gl0 ? f->xb : NULL, G->attn_norm, f->xb, E, n, E, E, hp->rms_eps));
        RP_TRY(mm(f, &G->wq, f->xb, 0, f->q, 0, n));
        RP_TRY(mm(f, &G->wk, f->xb, 0, f->k, 0, n));
        RP_TRY(mm(f, &G->wv, f->xb, 0, f->v, 0, n));
        if (G->q_norm) OP(rp_gpu_op_rmsnorm(ops, r, f->q, NULL, G->q_norm, f->q, HD, n * H, HD, HD, hp->rms_eps));
        if (G->k_norm) OP(rp_gpu_op_rmsnorm(ops, r, f->k, NULL, G->k_norm, f->k, HD, n * HK, HD, HD, hp->rms_eps));
        OP(rp_gpu_op_rope(ops, r, f->q, 0, QD, n, H, HD, R, neox, f->cs));
        OP(rp_gpu_op_rope(ops, r, f->k, 0, KD, n, HK, HD, R, neox, f->cs));
        /* each run's rows into its sequence's cells, then attention of every run over its own cache */
        for (int32_t ru = 0; ru < n_runs; ru++) {
            const uint32_t r0 = (uint32_t)f->runs[3 * ru], nr = (uint32_t)f->runs[3 * ru + 1];
            rp_gpu_kv *gk = kvs[f->runs[3 * ru + 2]]->gpu;
            const uint32_t off = layer_units(gk, gl);
            if (gk->type == RP_TYPE_Q8_0) {
                OP(rp_gpu_op_kv_store_q8_0_rows(ops, r, f->k, 0, KD, r0, nr, KD, f->cells, gk->buf[0], off));
                OP(rp_gpu_op_kv_store_q8_0_rows(ops, r, f->v, 0, KD, r0, nr, KD, f->cells, gk->buf[1], off));
            } else {
                OP(rp_gpu_op_kv_store_f16_rows(ops, r, f->k, 0, KD, r0, nr, KD, f->cells, gk->buf[0], off));
                OP(rp_gpu_op_kv_store_f16_rows(ops, r, f->v, 0, KD, r0, nr, KD, f->cells, gk->buf[1], off));
            }
        }
        for (int32_t ru = 0; ru < n_runs; ru++) {
            const uint32_t r0 = (uint32_t)f->runs[3 * ru], nr = (uint32_t)f->runs[3 * ru + 1];
            rp_gpu_kv *gk = kvs[f->runs[3 * ru + 2]]->gpu;
            const uint32_t off = layer_units(gk, gl);
            const rp_gpu_attn at = {.q = f->q, .k = gk->buf[0], .v = gk->buf[1], .n_cells = f->n_cells, .out = f->att,
                                    .n_rows = nr, .n_head = H, .n_head_kv = HK, .head_dim = HD, .ldq = QD, .ldo = QD,
                                    .k_off = off, .v_off = off, .scale = scale, .r0 = r0};
            if (gk->type == RP_TYPE_Q8_0) OP(rp_gpu_op_attn_q8_0(ops, r, &at));
            else OP(rp_gpu_op_attn_f16(ops, r, &at));
        }
        RP_TRY(mm(f, &G->wo, f->att, 0, f->xb, 0, n));
        /* x += att·Woᵀ; xn = norm(x) (the FFN's input) */
        OP(rp_gpu_op_rmsnorm(ops, r, f->x, f->xb, G->ffn_norm, f->xn, E, n, E, E, hp->rms_eps));
        RP_TRY(mm(f, &G->gate, f->xn, 0, f->gate, 0, n));
        RP_TRY(mm(f, &G->up, f->xn, 0, f->up, 0, n));
        OP(rp_gpu_op_swiglu(ops, r, f->gate, f->up, n * F));
        RP_TRY(mm(f, &G->down, f->gate, 0, f->xb, 0, n));
    }
    if (!head) {
        /* the last FFN output added (x += xb; the norm into xn is unused), and the hidden states back */
        if (gl1 > gl0)
            OP(rp_gpu_op_rmsnorm(ops, r, f->x, f->xb, o->layers[gl1 - 1].attn_norm, f->xn, E, n, E, E, hp->rms_eps));
        if (f->x_host) RP_TRY(rp_gpu_rec_copy(r, f->x, 0, f->x_host, 0, sizeof(float) * (size_t)n * E));
        return RP_OK;
    }
    OP(rp_gpu_op_rmsnorm(ops, r, f->x, gl1 > gl0 ? f->xb : NULL, o->out_norm, f->xn, E, n, E, E, hp->rms_eps));
    /* logits of the flagged rows: one matmul per span of consecutive flagged rows */
    int32_t j = 0;
    for (int32_t i = 0; i < b->n;) {
        if (!b->logits[i]) { i++; continue; }
        int32_t e = i;
        while (e < b->n && b->logits[e]) e++;
        RP_TRY(mm(f, &o->output, f->xn, (uint32_t)i * E, f->logits, (uint32_t)j * (uint32_t)hp->n_vocab,
                  (uint32_t)(e - i)));
        if (f->xo_host) RP_TRY(rp_gpu_rec_copy(r, f->xn, sizeof(float) * (size_t)i * E, f->xo_host,
                                               sizeof(float) * (size_t)j * E, sizeof(float) * (size_t)(e - i) * E));
        j += e - i;
        i = e;
    }
    return RP_OK;
}

rp_status rp_gpu_fwd_run(rp_gpu_fwd *f, const rp_batch *b, rp_kv *const *kvs, float *x, const float *rope_cs,
                         bool head, float *xo, float *logits, int32_t *n_out) {
    return rp_gpu_fwd_run_range(f, b, kvs, x, rope_cs, 0, f->o->n_gl, head, xo, logits, n_out);
}

rp_status rp_gpu_fwd_run_range(rp_gpu_fwd *f, const rp_batch *b, rp_kv *const *kvs, float *x, const float *rope_cs,
                               int32_t gl0, int32_t gl1, bool head, float *xo, float *logits, int32_t *n_out) {
    rp_gpu_offload *o = f->o;
    if (gl0 < 0 || gl1 > o->n_gl || gl0 > gl1)
        return rp_errorf(RP_ERR_RANGE, "gpu: GPU layers [%d, %d) of %d", gl0, gl1, o->n_gl);
    head = head && o->out_on_gpu && gl1 == o->n_gl;
    const rp_hparams *hp = &o->m->hp;
    const size_t E = (size_t)hp->n_embd, n = (size_t)b->n;
    *n_out = -1;
    if (b->n < 1 || b->n > f->cap_rows)
        return rp_errorf(RP_ERR_RANGE, "gpu: a batch of %d rows (the context's GPU buffers hold %d)", b->n, f->cap_rows);
    /* runs: consecutive rows of one sequence */
    int32_t n_runs = 0, n_flag = 0;
    for (int32_t i = 0; i < b->n;) {
        int32_t e = i + 1;
        while (e < b->n && b->seq[e] == b->seq[i]) e++;
        const rp_kv *kv = kvs[b->seq[i]];
        if (!kv->gpu)
            return rp_errorf(RP_ERR_INVALID_ARG, "gpu: sequence %d's KV cache has no GPU cells (made without the "
                                                 "model's GPU offload)", b->seq[i]);
        if (kv->gpu->err != RP_OK) return rp_errorf(kv->gpu->err, "gpu: the KV cache's last transfer failed: %s",
                                                    kv->gpu->why);
        f->runs[3 * n_runs] = i;
        f->runs[3 * n_runs + 1] = e - i;
        f->runs[3 * n_runs + 2] = b->seq[i];
        n_runs++;
        i = e;
    }
    for (int32_t i = 0; i < b->n; i++) n_flag += b->logits[i];
    if (head && n_flag > f->cap_out)
        return rp_errorf(RP_ERR_RANGE, "gpu: %d output rows exceed n_outputs %d", n_flag, f->cap_out);
    RP_TRY(rp_gpu_rec_wait(f->rec));   /* the host-written buffers are free again */
    RP_TRY(rp_gpu_buf_write(f->cells, 0, b->cell, sizeof(int32_t) * n));
    for (int32_t i = 0; i < b->n; i++) f->host_i[i] = b->cell[i] + 1;
    RP_TRY(rp_gpu_buf_write(f->n_cells, 0, f->host_i, sizeof(int32_t) * n));
    RP_TRY(rp_gpu_buf_write(f->cs, 0, rope_cs, sizeof(float) * n * (size_t)hp->n_rot));
    RP_TRY(rp_gpu_buf_write(f->x_host ? f->x_host : f->x, 0, x, sizeof(float) * n * E));
    RP_TRY(rp_gpu_rec_begin(f->rec));
    f->n_disp = 0;
    rp_status st = record(f, b, kvs, n_runs, gl0, gl1, head);
    if (st != RP_OK) {   /* close the recording; what it holds is harmless to run */
        char msg[400];
        snprintf(msg, sizeof msg, "%s", rp_last_error());
        (void)rp_gpu_rec_submit(f->rec, NULL);
        (void)rp_gpu_rec_wait(f->rec);
        return rp_errorf(st, "%s", msg);
    }
    RP_TRY(rp_gpu_rec_submit(f->rec, NULL));
    RP_TRY(rp_gpu_rec_wait(f->rec));
    if (!head) return rp_gpu_buf_read(f->x_host ? f->x_host : f->x, 0, x, sizeof(float) * n * E);
    const size_t V = (size_t)hp->n_vocab;
    RP_TRY(rp_gpu_buf_read(f->logits, 0, logits, sizeof(float) * (size_t)n_flag * V));
    if (f->xo_host) {
        RP_TRY(rp_gpu_buf_read(f->xo_host, 0, xo, sizeof(float) * (size_t)n_flag * E));
    } else {
        const float *xn = rp_gpu_buf_map(f->xn);
        int32_t j = 0;
        for (int32_t i = 0; i < b->n; i++)
            if (b->logits[i]) memcpy(xo + (size_t)j++ * E, xn + (size_t)i * E, sizeof(float) * E);
    }
    *n_out = n_flag;
    return RP_OK;
}
