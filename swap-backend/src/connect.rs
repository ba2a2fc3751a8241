//! One way from a server's URL to a connected store: the scheme picks the client. The agent
//! pages through what it returns; `memliner doctor` checks a server through the same call.

use crate::fabric::FabricStore;
use crate::memfile::MemfileStore;
use crate::protocol::ServerStats;
use crate::{ClientOptions, PageStore, Scheme, ServerUrl, StoreError, TcpStore};

/// A store connected to the server a URL names.
#[derive(Debug)]
pub enum Connected {
    Tcp(TcpStore),
    Fabric(FabricStore),
    Unix(MemfileStore),
}

/// Connects to the server `url` names, with the client `options`.
pub fn connect(url: &ServerUrl, options: ClientOptions) -> Result<Connected, StoreError> {
    let at = url.authority();
    Ok(match url.scheme {
        Scheme::Tcp => Connected::Tcp(TcpStore::connect(&at, options)?),
        Scheme::Fabric => Connected::Fabric(FabricStore::connect(&at, options)?),
        Scheme::Unix => Connected::Unix(MemfileStore::connect(&at, options)?),
    })
}

impl Connected {
    /// The store, to page through.
    pub fn into_store(self) -> Box<dyn PageStore> {
        match self {
            Connected::Tcp(s) => Box::new(s),
            Connected::Fabric(s) => Box::new(s),
            Connected::Unix(s) => Box::new(s),
        }
    }

    pub fn store(&self) -> &dyn PageStore {
        match self {
            Connected::Tcp(s) => s,
            Connected::Fabric(s) => s,
            Connected::Unix(s) => s,
        }
    }

    /// The server's figures: capacity, pages stored, clients.
    pub fn server_stats(&self) -> Result<ServerStats, StoreError> {
        match self {
            Connected::Tcp(s) => s.server_stats(),
            Connected::Fabric(s) => s.server_stats(),
            Connected::Unix(s) => s.server_stats(),
        }
    }

    /// How pages travel one-sidedly (`over PROVIDER`, `in a memory file`); `None` for frames
    /// over TCP, where the server does every read and write.
    pub fn one_sided(&self) -> Option<String> {
        match self {
            Connected::Tcp(_) => None,
            Connected::Fabric(s) => Some(format!("over {}", s.provider())),
            Connected::Unix(_) => Some("in a memory file".into()),
        }
    }
}
