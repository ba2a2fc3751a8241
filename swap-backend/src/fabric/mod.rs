//! One-sided page storage through libfabric (`fabric://`): the client store and the server's
//! pool. libfabric itself is reached only through [`memliner_fabric_sys`].

mod client;

pub use client::{FabricStore, ALLOC_CHUNK, CHANNEL_PAGES, KEEP_FREE};

/// The provider to ask for: none when `FI_PROVIDER` is set (libfabric then filters by it, as
/// every libfabric program does), else `efa` on a host whose RDMA devices are AWS's (named
/// `efa_N`; reliable datagrams only), `verbs` on one with another RDMA device, and `tcp`
/// elsewhere.
pub fn provider_choice() -> Option<String> {
    if std::env::var_os("FI_PROVIDER").is_some() {
        return None;
    }
    let devices: Vec<String> = std::fs::read_dir("/sys/class/infiniband")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    Some(
        if devices.iter().any(|d| d.starts_with("efa")) {
            "efa"
        } else if !devices.is_empty() {
            "verbs"
        } else {
            "tcp"
        }
        .to_string(),
    )
}

/// What the server listens with on `host`: connected endpoints (`FI_EP_MSG`: tcp, verbs)
/// where the provider offers them, else reliable datagrams (`FI_EP_RDM`: shm, efa, and the
/// layered `verbs;ofi_rxm` or `tcp;ofi_rxm`, which `FI_PROVIDER` names to choose them). The
/// error is the connected query's, which names the provider asked for.
pub fn listen_info(
    host: &str,
    provider: Option<&str>,
) -> Result<memliner_fabric_sys::Info, memliner_fabric_sys::FabricError> {
    use memliner_fabric_sys::{EpType, Info};
    Info::rma(EpType::Msg, Some(host), Some("0"), true, provider)
        .or_else(|msg| rdm_info(host, true, provider).map_err(|_| msg))
}

/// Reliable-datagram endpoints: for a provider whose addresses are IP's (tcp;ofi_rxm, and
/// verbs;ofi_rxm over IPoIB), at `host`'s interface (`source`: to listen there, any port);
/// for one whose addresses are not (shm's are names; `host` would be read as a name server's
/// address), wherever the provider puts them.
pub fn rdm_info(
    host: &str,
    source: bool,
    provider: Option<&str>,
) -> Result<memliner_fabric_sys::Info, memliner_fabric_sys::FabricError> {
    use memliner_fabric_sys::{EpType, Info};
    let any = Info::rma(EpType::Rdm, None, None, false, provider)?;
    if !any.ip_addresses() {
        return Ok(any);
    }
    let service = source.then_some("0");
    let provider = any.provider();
    Info::rma(EpType::Rdm, Some(host), service, source, Some(&provider))
}

/// The message for a listener no provider can serve.
pub fn no_provider(
    e: memliner_fabric_sys::FabricError,
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
