/* bench.h — the benchmarks of `reprise-bench` (`reprise bench <what>` forwards to it): one entry point each. */
#ifndef RP_BENCH_H
#define RP_BENCH_H

/* Each takes the arguments after `reprise bench` (argv[0] is the benchmark's name) and returns the exit status. */
int bench_model(int argc, char **argv);
int bench_kernels(int argc, char **argv);
int bench_attn(int argc, char **argv);
int bench_fidelity(int argc, char **argv);
int bench_agents(int argc, char **argv);
int bench_reuse(int argc, char **argv);
int bench_sweep(int argc, char **argv);
int bench_ablation(int argc, char **argv);
int bench_all(int argc, char **argv);
int bench_grammar(int argc, char **argv);
int bench_split(int argc, char **argv);

#endif
