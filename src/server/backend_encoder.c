/* backend_encoder.c — the server's backend for an encoder (bert, nomic-bert: an embedding model). It generates
 * nothing: the server answers /v1/embeddings from its own rp_embedder (api_embeddings.c); completions, chat and
 * sessions are refused before they reach a backend (rp_backend_is_encoder), so these ops only hold the model. */
#include <string.h>

#include "core/error.h"
#include "server/backend_internal.h"

static rp_status refuse(rp_backend *b) {
    return rp_errorf(RP_ERR_UNSUPPORTED, "'%s' is an embedding model (%s): it does not generate text",
                     rp_model_describe(b->m).name, rp_model_describe(b->m).arch);
}

static rp_status enc_start(rp_backend *b) { (void)b; return RP_OK; }
static void enc_stop(rp_backend *b) { (void)b; }
static rp_status enc_submit(rp_backend *b, rp_job *j) { (void)j; return refuse(b); }
static void enc_cancel(rp_backend *b, rp_job *j) { (void)b; (void)j; }
static rp_status enc_session_create(rp_backend *b, rp_bk_session **out) { *out = NULL; return refuse(b); }
static void enc_session_free(rp_backend *b, rp_bk_session *s) { (void)b; (void)s; }
static void enc_session_suspend(rp_backend *b, rp_bk_session *s) { (void)b; (void)s; }
static int32_t enc_session_resident(rp_backend *b, rp_bk_session *s) { (void)b; (void)s; return 0; }
static void enc_stats(rp_backend *b, rp_backend_stats *out) { (void)b; memset(out, 0, sizeof *out); }

const rp_backend_ops rp_backend_encoder_ops = {
    .kind = "encoder",
    .start = enc_start,
    .stop = enc_stop,
    .submit = enc_submit,
    .submit_n = NULL,
    .cancel = enc_cancel,
    .session_create = enc_session_create,
    .session_free = enc_session_free,
    .session_suspend = enc_session_suspend,
    .session_resident = enc_session_resident,
    .stats = enc_stats,
    .flush = NULL,
};
