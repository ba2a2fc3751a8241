//! The `memliner` command's pieces, as a library so that integration tests and the bench
//! (`memliner-bench`, benchmarks/harness) use the same code as the command.

pub mod aggregate;
pub mod demo;
pub mod doctor;
pub mod flags;
pub mod kernel;
pub mod live;
pub mod locate;
pub mod rdma_stack;
pub mod run;
pub mod scrape;
pub mod summary;
pub mod top;
pub mod watch;
pub mod workloads;
