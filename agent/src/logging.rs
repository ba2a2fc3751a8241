//! The agent's log: one line per message on stderr, prefixed `memliner:`, at or below the level
//! the `log=` option sets. Never used on the fault path.

use std::sync::atomic::{AtomicU8, Ordering};

use crate::options::LogLevel;

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Warn as u8);

/// Sets the level (from the options, before anything is logged).
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether a message at `level` is written.
pub fn enabled(level: LogLevel) -> bool {
    (level as u8) <= LEVEL.load(Ordering::Relaxed)
}

/// Logs a line to stderr at `level`.
macro_rules! log {
    ($level:expr, $($arg:tt)*) => {
        if $crate::logging::enabled($level) {
            eprintln!("memliner: {}", format!($($arg)*));
        }
    };
}
pub(crate) use log;
