//! One-sided page storage through libfabric (`fabric://`): the client store and the server's
//! pool. libfabric itself is reached only through [`crate::fabric_ffi`].

mod client;
mod target;

pub use client::{FabricStore, ALLOC_CHUNK, CHANNEL_PAGES, KEEP_FREE};
pub use target::Target;

/// The provider to ask for: none when `FI_PROVIDER` is set (libfabric then filters by it, as
/// every libfabric program does), else `verbs` on a host with an RDMA device and `tcp`
/// elsewhere.
pub fn provider_choice() -> Option<String> {
    if std::env::var_os("FI_PROVIDER").is_some() {
        return None;
    }
    let has_device = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    Some(if has_device { "verbs" } else { "tcp" }.to_string())
}

/// The message for a listener no provider can serve.
pub(crate) fn no_provider(
    e: crate::fabric_ffi::FabricError,
    host: &str,
    provider: Option<&str>,
) -> String {
    let which = provider.map_or_else(
        || {
            format!(
                "FI_PROVIDER={}",
                std::env::var("FI_PROVIDER").unwrap_or_default()
            )
        },
        |p| format!("provider {p}"),
    );
    format!(
        "no libfabric {which} for one-sided reads and writes on {host}: {e} (`memliner doctor` lists the providers this host has)"
    )
}
