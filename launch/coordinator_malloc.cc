// jemalloc's options in the processes that run a coordinator (the elastra command, bench_scale):
// compiled into each of them through elastra_coordinator_malloc, only where jemalloc is their
// allocator (cmake/ElastraDependencies.cmake). jemalloc reads `malloc_conf` once, when it starts;
// the MALLOC_CONF environment variable, read after it, overrides any of these.
//
// A change at 16,384 workers allocates tens of MB of frames and per-worker vectors and frees them
// once the change is sent; the next change, minutes later, needs as much again. By default
// jemalloc hands freed pages back to the kernel after 10 s, and will not carve a small slab out
// of a free extent over 64 times its size, so each change faulted its memory in afresh: about
// 2,000 page faults in a planned grow at 16,384 workers, 16-20 ms of its 50 on the machine of
// docs/scale.md, where a fault costs 5-8 us. With these options the coordinator keeps the pages
// it once used (its resident size stays at its peak: bench_scale's, simulator included, is about
// 180 MB at 16,384 workers) and reuses any free extent, so a change after the first faults
// almost nothing in.
extern "C" {
// Read by jemalloc (its documented `malloc_conf` symbol): never purge freed pages, dirty or
// muzzy; fit a request in any free extent however much larger.
extern const char* malloc_conf;
const char* malloc_conf = "dirty_decay_ms:-1,muzzy_decay_ms:-1,lg_extent_max_active_fit:63";
}
