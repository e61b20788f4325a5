//! The integration tests as one test binary. Each test binary is linked with the release profile's fat LTO
//! over all of arrow and parquet (minutes on two cores), so `make test` builds one instead of one per file.
//! `cargo test --release --test fuzz` still builds and runs the fuzzers alone (`make fuzz`).

#[path = "fuzz.rs"]
mod fuzz;
#[path = "merge_shards.rs"]
mod merge_shards;
#[path = "module_graph.rs"]
mod module_graph;
