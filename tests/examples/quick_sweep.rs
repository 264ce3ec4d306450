fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let cfg = kvroute_harness::sweep::SweepConfig {
        start: 0,
        seeds: n,
        jobs: 2,
        shard: None,
    };
    let r = kvroute_harness::sweep::run(&cfg, || {});
    println!(
        "seeds {} failures {} {:.0}/s",
        r.seeds_run,
        r.failures.len(),
        r.seeds_per_second()
    );
    for f in r.failures.iter().take(5) {
        println!("seed {}: {}\n  {:?}", f.seed, f.divergence, f.shrunk_trace);
    }
}
