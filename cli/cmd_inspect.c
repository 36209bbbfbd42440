/* cmd_inspect.c — `reprise inspect MODEL.gguf`: metadata, tensor table and the derived hyper-parameters. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "core/bigmem.h"
#include "gguf/gguf.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/model.h"

static int inspect_system(void) {
    const rp_cpu_info *c = rp_cpu_info_get();
    printf("cpu: %s\n", c->brand);
    printf("features: avx2 %d fma %d f16c %d | avx512 f %d bw %d dq %d vl %d vnni %d bf16 %d fp16 %d | avx-vnni %d\n",
           c->avx2, c->fma, c->f16c, c->avx512f, c->avx512bw, c->avx512dq, c->avx512vl, c->avx512vnni, c->avx512bf16,
           c->avx512fp16, c->avxvnni);
    printf("amx: tile %d int8 %d bf16 %d | os state: avx %d avx512 %d amx %d | amx permission granted %d\n",
           c->amx_tile, c->amx_int8, c->amx_bf16, c->os_avx, c->os_avx512, c->os_amx, c->amx_permitted);
    if (c->amx_permitted && c->best < RP_CPU_AMX)
        printf("note: AMX is present but its kernels are opt-in until validated on real hardware (RP_ENABLE_AMX=1)\n");
    rp_cpu_level act = rp_cpu_level_active();
    printf("best level: %s\nchosen level: %s%s\n", rp_cpu_level_name(c->best), rp_cpu_level_name(act),
           act != c->best ? " (forced by RP_FORCE_REF / RP_CPU / --cpu)" : "");
    char thp[32];
    rp_bigmem_thp_mode(thp, sizeof thp);
    printf("memory: transparent huge pages '%s'; packed weights %s\n", thp,
           !rp_bigmem_huge_enabled() ? "on 4 KiB pages (RP_NO_HUGEPAGES)"
           : strcmp(thp, "never") == 0 ? "on 4 KiB pages (THP off)"
                                       : "ask for 2 MiB pages (MADV_HUGEPAGE)");
    printf("kernels at %s:\n", rp_cpu_level_name(act));
    for (int t = 0; t < RP_TYPE_COUNT; t++) {   /* every weight type with kernels */
        const rp_type_traits *tr = rp_type_get_traits(t);
        if (!tr || !tr->can_compute) continue;
        const rp_mm_kernel *k = rp_mm_kernel_select((rp_type)t, act);
        printf("  matmul %-6s -> %s\n", tr->name, k ? k->name : "(none)");
    }
    const rp_type kvt[] = {RP_TYPE_F16, RP_TYPE_Q8_0, RP_TYPE_F32};
    for (size_t i = 0; i < 3; i++) {
        const rp_attn_kernel *k = rp_attn_kernel_select(kvt[i], act);
        printf("  attention kv %-5s -> %s\n", rp_type_get_traits((int)kvt[i])->name, k ? k->name : "(none)");
    }
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "inspect"};
    const char *path = NULL;
    bool no_tensors = false, system = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise inspect [--no-tensors] MODEL.gguf\n"
                   "       reprise inspect --system    CPU features found and the kernels chosen\n");
            return 0;
        } else if (cli_is(&a, "--no-tensors", NULL)) no_tensors = true;
        else if (cli_is(&a, "--system", NULL)) system = true;
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &path)) return 2; }
        else if (argv[a.i][0] == '-') return cli_unknown(&a);
        else path = argv[a.i];
    }
    if (system) return inspect_system();
    if (!path) { fprintf(stderr, "reprise inspect: a GGUF file is required\n"); return 2; }
    rp_gguf *g = NULL;
    rp_status st = rp_gguf_open(path, &g);
    if (st != RP_OK) return cli_fail("inspect", path, st);
    printf("file: %s\nversion: %u  size: %llu bytes  data offset: %llu  alignment: %u\n", path, rp_gguf_version(g),
           (unsigned long long)rp_gguf_file_size(g), (unsigned long long)rp_gguf_data_offset(g), rp_gguf_alignment(g));
    printf("\nmetadata (%llu keys):\n", (unsigned long long)rp_gguf_n_kv(g));
    char buf[512];
    for (uint64_t i = 0; i < rp_gguf_n_kv(g); i++) {
        rp_str k = rp_gguf_kv_key(g, i);
        rp_gguf_kv_format(g, i, buf, sizeof buf);
        printf("  %-48.*s %-6s %s\n", (int)k.len, k.ptr, rp_gguf_vtype_name(rp_gguf_kv_type(g, i)), buf);
    }
    uint64_t nt = rp_gguf_n_tensors(g), total = 0;
    if (!no_tensors) printf("\ntensors (%llu):\n  %-40s %-6s %-28s %12s %12s\n", (unsigned long long)nt, "name", "type",
                            "shape (ne0 first)", "offset", "bytes");
    for (uint64_t i = 0; i < nt; i++) {
        const rp_gguf_tensor *t = rp_gguf_tensor_at(g, i);
        total += t->nbytes;
        if (no_tensors) continue;
        char shape[96] = "";
        size_t o = 0;
        for (uint32_t d = 0; d < t->n_dims; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, d ? " x %lld" : "%lld", (long long)t->ne[d]);
        const rp_type_traits *tr = rp_type_get_traits((int)t->type);
        printf("  %-40.*s %-6s %-28s %12llu %12llu\n", (int)t->name.len, t->name.ptr, tr ? tr->name : "?", shape,
               (unsigned long long)t->offset, (unsigned long long)t->nbytes);
    }
    printf("\ntotal tensor bytes: %llu (%.2f MiB)\n", (unsigned long long)total, total / 1048576.0);
    rp_gguf_close(g);

    /* derived view, when it is a model we can load */
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = nt == 0;
    st = cli_model_load(path, mp, &m);
    if (st != RP_OK) {
        printf("\nmodel: not loadable by Reprise: %s: %s\n", rp_strerror(st), rp_last_error());
        return 0;
    }
    if (!mp.vocab_only) {
        const rp_hparams *hp = &m->hp;
        printf("\nmodel: arch %s, n_vocab %d, n_embd %d, n_ff %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, "
               "n_rot %d, rope %s base %g%s, rms_eps %g, %s output, n_ctx_train %d\n",
               rp_arch_name(hp->arch), hp->n_vocab, hp->n_embd, hp->n_ff, hp->n_layer, hp->n_head, hp->n_head_kv,
               hp->head_dim, hp->n_rot, hp->rope_kind == RP_ROPE_NEOX ? "neox" : "norm", hp->rope_base,
               hp->rope_llama3 ? " (llama3 scaling)" : "", hp->rms_eps, m->tied_output ? "tied" : "separate",
               hp->n_ctx_train);
        printf("fingerprint: %016llx\n", (unsigned long long)m->fingerprint);
    }
    if (m->tok)
        printf("tokenizer: %s, %d tokens, bos %d, eos %d, eot %d, chat template: %s\n",
               rp_tokenizer_kind(m->tok) == RP_TOK_SPM ? "spm" : "bpe", rp_tokenizer_n_vocab(m->tok),
               rp_tokenizer_bos(m->tok), rp_tokenizer_eos(m->tok), rp_tokenizer_eot(m->tok), rp_chat_format_name(m->chat));
    rp_model_free(m);
    return 0;
}
