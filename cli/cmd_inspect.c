/* cmd_inspect.c — `reprise inspect MODEL.gguf`: metadata, tensor table and the derived hyper-parameters. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "progress.h"
#include "reprise.h"

static void print_bytes(uint64_t b) {
    if (b >= (1ull << 30)) printf("%.1f GiB", (double)b / (1ull << 30));
    else printf("%.0f MiB", (double)b / (1ull << 20));
}

/* The Vulkan devices: kind, memory types, subgroup size, the features the GPU kernels can use. */
static void inspect_gpus(void) {
    rp_gpu_desc d[8];
    int32_t n = 0;
    const rp_status st = rp_gpu_list(d, 8, &n);
    if (st != RP_OK) {
        printf("gpu: none (%s)\n", rp_last_error());
        return;
    }
    if (n == 0) {
        printf("gpu: none (the Vulkan loader found no device)\n");
        return;
    }
    printf("gpu: %d Vulkan device%s\n", n, n == 1 ? "" : "s");
    for (int32_t i = 0; i < n && i < 8; i++) {
        const rp_gpu_desc *g = &d[i];
        printf("  [%d] %s (%s; Vulkan %s; %s; vendor 0x%04x device 0x%04x)%s\n", g->index, g->name, g->kind,
               g->api_version, g->driver, g->vendor_id, g->device_id, g->usable ? "" : " — not usable: needs Vulkan "
               "1.2 timeline semaphores and a compute queue");
        printf("      subgroup size %u | fp16 %d | int8 dot product %d | cooperative matrix %d | shared memory %d "
               "(%s)\n", g->subgroup_size, g->fp16, g->int8_dot, g->cooperative_matrix, g->shared_memory,
               g->shared_memory ? "buffers used in place, no copies" : "uploads through staging");
        printf("      device-local heap ");
        print_bytes(g->device_local_bytes);
        printf("\n");
        for (int32_t m = 0; m < g->n_mem_types; m++) {
            const rp_gpu_mem_type *t = &g->mem_types[m];
            printf("      memory type %d:%s%s%s%s (heap ", m, t->device_local ? " device-local" : "",
                   t->host_visible ? " host-visible" : "", t->host_coherent ? " host-coherent" : "",
                   t->host_cached ? " host-cached" : "");
            print_bytes(t->heap_bytes);
            printf(")\n");
        }
    }
}

static int inspect_system(void) {
    rp_cpu_desc c;
    rp_cpu_describe(&c);
    printf("cpu: %s\n", c.brand);
#if defined(__x86_64__)
    printf("features: avx2 %d fma %d f16c %d | avx512 f %d bw %d dq %d vl %d vnni %d bf16 %d fp16 %d | avx-vnni %d\n",
           c.avx2, c.fma, c.f16c, c.avx512f, c.avx512bw, c.avx512dq, c.avx512vl, c.avx512vnni, c.avx512bf16,
           c.avx512fp16, c.avxvnni);
    printf("amx: tile %d int8 %d bf16 %d | os state: avx %d avx512 %d amx %d | amx permission granted %d\n",
           c.amx_tile, c.amx_int8, c.amx_bf16, c.os_avx, c.os_avx512, c.os_amx, c.amx_permitted);
#else
    /* aarch64 (hwcaps: neon, dotprod, i8mm, sve2, sme ...) and the rest: the library's one-line summary, which
     * names this architecture's features and its levels */
    char info[512];
    rp_system_info(info, sizeof info);
    printf("features: %s\n", info);
#endif
    if (c.amx_opt_in)
        printf("note: AMX is present but its kernels are opt-in until validated on real hardware (RP_ENABLE_AMX=1)\n");
    printf("best level: %s\nchosen level: %s%s\n", c.best, c.active,
           strcmp(c.active, c.best) ? " (forced by RP_FORCE_REF / RP_CPU / --cpu)" : "");
    printf("memory: transparent huge pages '%s'; packed weights %s\n", c.thp,
           !c.huge_pages ? "on 4 KiB pages (RP_NO_HUGEPAGES)"
           : strcmp(c.thp, "never") == 0 ? "on 4 KiB pages (THP off)"
                                         : "ask for 2 MiB pages (MADV_HUGEPAGE)");
    printf("kernels at %s:\n", c.active);
    rp_kernel_desc k[64];
    const int32_t nk = rp_kernel_table(k, 64);
    for (int32_t i = 0; i < nk && i < 64; i++)
        printf("  %s %-6s -> %s\n", strcmp(k[i].op, "matmul") ? "attention kv" : "matmul", k[i].type,
               k[i].kernel ? k[i].kernel : "(none)");
    inspect_gpus();
    return 0;
}

int cmd_inspect(int argc, char **argv) {
    cli_args a = {argc, 1, argv, "inspect"};
    const char *path = NULL;
    bool no_tensors = false, system = false;
    for (; a.i < argc; a.i++) {
        if (cli_is(&a, "-h", "--help")) {
            printf("usage: reprise inspect [--no-tensors] MODEL.gguf\n"
                   "       reprise inspect --system    CPU features found, the kernels chosen, Vulkan devices\n");
            return 0;
        } else if (cli_is(&a, "--no-tensors", NULL)) no_tensors = true;
        else if (cli_is(&a, "--system", NULL)) system = true;
        else if (cli_is(&a, "-m", "--model")) { if (!cli_str(&a, &path)) return 2; }
        else if (argv[a.i][0] == '-') return cli_unknown(&a);
        else path = argv[a.i];
    }
    if (system) return inspect_system();
    if (!path) { fprintf(stderr, "reprise inspect: a GGUF file is required\n"); return 2; }
    rp_model_file *f = NULL;
    rp_status st = rp_model_file_open(path, &f);
    if (st != RP_OK) return cli_fail("inspect", path, st);
    const rp_model_file_desc fd = rp_model_file_describe(f);
    printf("file: %s\nversion: %u  size: %llu bytes  data offset: %llu  alignment: %u\n", path, fd.version,
           (unsigned long long)fd.file_size, (unsigned long long)fd.data_offset, fd.alignment);
    printf("\nmetadata (%llu keys):\n", (unsigned long long)fd.n_meta);
    char buf[512];
    for (int64_t i = 0; i < fd.n_meta; i++) {
        rp_meta_entry e;
        rp_model_file_meta(f, i, &e);
        rp_model_file_meta_text(f, i, buf, sizeof buf);
        printf("  %-48s %-6s %s\n", e.key, e.type_name, buf);
    }
    const int64_t nt = fd.n_tensors;
    if (!no_tensors) printf("\ntensors (%llu):\n  %-40s %-6s %-28s %12s %12s\n", (unsigned long long)nt, "name", "type",
                            "shape (ne0 first)", "offset", "bytes");
    for (int64_t i = 0; i < nt && !no_tensors; i++) {
        rp_tensor_desc t;
        rp_model_file_tensor(f, i, &t);
        char shape[96] = "";
        size_t o = 0;
        for (int32_t d = 0; d < t.n_dims; d++)
            o += (size_t)snprintf(shape + o, sizeof shape - o, d ? " x %lld" : "%lld", (long long)t.ne[d]);
        printf("  %-40s %-6s %-28s %12llu %12llu\n", t.name, t.type_name, shape, (unsigned long long)t.offset,
               (unsigned long long)t.bytes);
    }
    const uint64_t total = fd.tensor_bytes;
    printf("\ntotal tensor bytes: %llu (%.2f MiB)\n", (unsigned long long)total, total / 1048576.0);
    rp_model_file_close(f);

    /* derived view, when it is a model we can load */
    rp_model *m = NULL;
    rp_model_params mp = rp_model_default_params();
    mp.vocab_only = nt == 0;
    st = cli_model_load(path, mp, &m);
    if (st != RP_OK) {
        printf("\nmodel: not loadable by Reprise: %s: %s\n", rp_strerror(st), rp_last_error());
        return 0;
    }
    const rp_model_desc d = rp_model_describe(m);
    if (!mp.vocab_only) {
        printf("\nmodel: arch %s, n_vocab %d, n_embd %d, n_ff %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, "
               "n_rot %d, rope %s base %g%s, rms_eps %g, %s output, n_ctx_train %d\n",
               d.arch, d.n_vocab, d.n_embd, d.n_ff, d.n_layer, d.n_head, d.n_head_kv, d.head_dim, d.n_rot,
               d.rope_neox ? "neox" : "norm", d.rope_base, d.rope_llama3 ? " (llama3 scaling)" : "", d.rms_eps,
               d.tied_output ? "tied" : "separate", d.n_ctx_train);
        printf("fingerprint: %016llx\n", (unsigned long long)d.fingerprint);
        if (d.n_swa_layers > 0) {   /* what a context of the training length allocates, f16, with and without --swa-full */
            const int32_t nc = d.n_ctx_train > 0 ? d.n_ctx_train : 4096;
            uint64_t ring = 0, full = 0;
            if (rp_kv_estimate_ex(m, nc, RP_KV_F16, 512, false, &ring) == RP_OK &&
                rp_kv_estimate_ex(m, nc, RP_KV_F16, 512, true, &full) == RP_OK)
                printf("sliding window: %d tokens on %d of %d layers; f16 KV per sequence at %d tokens: %.1f MiB "
                       "(those layers hold window + batch 512 cells), %.1f MiB with --swa-full\n",
                       d.n_swa, d.n_swa_layers, d.n_layer, nc, (double)ring / 1048576.0, (double)full / 1048576.0);
        }
    }
    if (d.has_tokenizer)   /* a template none of the known formats matches: "unknown" here ("none" in the desc) */
        printf("tokenizer: %s, %d tokens, bos %d, eos %d, eot %d, chat template: %s\n", d.tokenizer, d.n_tokens,
               rp_token_bos(m), rp_token_eos(m), rp_token_eot(m), strcmp(d.chat_format, "none") ? d.chat_format : "unknown");
    rp_model_free(m);
    return 0;
}
