//! The `memliner` command's pieces, as a library so that integration tests and benchmarks use
//! the same code as the command.

pub mod aggregate;
pub mod bench;
pub mod demo;
pub mod doctor;
pub mod flags;
pub mod live;
pub mod locate;
pub mod run;
pub mod scrape;
pub mod summary;
pub mod top;
pub mod watch;
pub mod workloads;
