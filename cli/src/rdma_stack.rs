//! What of the RDMA stack this machine has: the user-space libraries a one-sided transport
//! loads at run time (probed with `dlopen`, never linked), and the devices and ports the
//! kernel exposes under `/sys/class/infiniband` (what `ibv_devinfo` and `ibstat` read).
//! For `memliner doctor`; nothing here is needed to page over TCP.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::path::Path;

/// A shared library of the RDMA stack.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Library {
    /// The soname looked for.
    pub name: String,
    pub found: bool,
    /// What the library says of its version, where it has a call for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why it could not be loaded (the loader's message).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One port of an RDMA device, as sysfs shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Port {
    pub port: u32,
    /// e.g. `4: ACTIVE`.
    pub state: String,
    /// e.g. `5: LinkUp`.
    pub phys_state: String,
    /// e.g. `100 Gb/sec (4X EDR)`.
    pub rate: String,
    /// `InfiniBand` or `Ethernet` (RoCE).
    pub link_layer: String,
    /// The port's non-zero GIDs.
    pub gids: Vec<String>,
}

/// An RDMA device (`mlx5_0`, `rxe0`, `efa_0`, ...).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Device {
    pub name: String,
    pub ports: Vec<Port>,
}

/// The libraries a one-sided transport would load, in the order it needs them.
pub const LIBRARIES: [&str; 3] = ["libibverbs.so.1", "librdmacm.so.1", "libfabric.so.1"];

/// Tries to load each of [`LIBRARIES`]; libfabric is asked its version (`fi_version`).
pub fn libraries() -> Vec<Library> {
    LIBRARIES.iter().map(|name| probe(name)).collect()
}

fn probe(name: &str) -> Library {
    let c = CString::new(name).expect("no NUL in a soname");
    // Loading runs constructors, some of which install signal handlers (see there); those
    // would point into unloaded code after the dlclose below.
    let handle = memliner_fabric_sys::keeping_signal_handlers(|| {
        // SAFETY: dlopen with a valid C string; RTLD_LOCAL keeps its symbols out of ours. The
        // handle is closed below, and nothing from the library outlives this function.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) }
    });
    if handle.is_null() {
        // SAFETY: dlerror returns a thread-local C string or NULL.
        let err = unsafe { libc::dlerror() };
        let error = (!err.is_null()).then(|| {
            // SAFETY: non-null: a NUL-terminated message owned by the loader.
            unsafe { CStr::from_ptr(err) }
                .to_string_lossy()
                .into_owned()
        });
        return Library {
            name: name.into(),
            found: false,
            version: None,
            error,
        };
    }
    let mut version = None;
    if name.starts_with("libfabric") {
        // SAFETY: the handle is live; the name is a valid C string.
        let sym = unsafe { libc::dlsym(handle, c"fi_version".as_ptr()) };
        if !sym.is_null() {
            // SAFETY: fi_version is `uint32_t fi_version(void)` in every libfabric release.
            let f: extern "C" fn() -> u32 = unsafe { std::mem::transmute(sym) };
            let v = f();
            version = Some(format!("{}.{}", v >> 16, v & 0xffff));
        }
    }
    // SAFETY: the handle came from dlopen above and no symbol of it is used after this.
    unsafe { libc::dlclose(handle) };
    Library {
        name: name.into(),
        found: true,
        version,
        error: None,
    }
}

/// The RDMA devices under `root` (normally `/sys/class/infiniband`); `None` when the
/// directory does not exist (the kernel has no RDMA support loaded).
pub fn devices(root: &Path) -> Option<Vec<Device>> {
    let entries = std::fs::read_dir(root).ok()?;
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let mut devices: Vec<Device> = entries
        .flatten()
        .map(|dev| {
            let mut ports: Vec<Port> = std::fs::read_dir(dev.path().join("ports"))
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|p| {
                    let port: u32 = p.file_name().to_str()?.parse().ok()?;
                    let dir = p.path();
                    let mut gids: Vec<String> = std::fs::read_dir(dir.join("gids"))
                        .into_iter()
                        .flatten()
                        .flatten()
                        .map(|g| read(&g.path()))
                        .filter(|g| !g.is_empty() && g.chars().any(|c| c != '0' && c != ':'))
                        .collect();
                    gids.sort();
                    Some(Port {
                        port,
                        state: read(&dir.join("state")),
                        phys_state: read(&dir.join("phys_state")),
                        rate: read(&dir.join("rate")),
                        link_layer: read(&dir.join("link_layer")),
                        gids,
                    })
                })
                .collect();
            ports.sort_by_key(|p| p.port);
            Device {
                name: dev.file_name().to_string_lossy().into_owned(),
                ports,
            }
        })
        .collect();
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    Some(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_ports_read_as_sysfs_lays_them_out() {
        let root = std::env::temp_dir().join(format!("memliner-ib-{}", std::process::id()));
        let port = root.join("mlx5_0/ports/1");
        std::fs::create_dir_all(port.join("gids")).unwrap();
        std::fs::write(port.join("state"), "4: ACTIVE\n").unwrap();
        std::fs::write(port.join("phys_state"), "5: LinkUp\n").unwrap();
        std::fs::write(port.join("rate"), "100 Gb/sec (4X EDR)\n").unwrap();
        std::fs::write(port.join("link_layer"), "Ethernet\n").unwrap();
        std::fs::write(
            port.join("gids/0"),
            "fe80:0000:0000:0000:0202:c9ff:fe00:0001\n",
        )
        .unwrap();
        std::fs::write(
            port.join("gids/1"),
            "0000:0000:0000:0000:0000:0000:0000:0000\n",
        )
        .unwrap();
        let d = devices(&root).unwrap();
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].name, "mlx5_0");
        let p = &d[0].ports[0];
        assert_eq!((p.port, p.state.as_str()), (1, "4: ACTIVE"));
        assert_eq!(p.link_layer, "Ethernet");
        assert_eq!(p.gids, ["fe80:0000:0000:0000:0202:c9ff:fe00:0001"]);
        assert!(devices(Path::new("/nonexistent/infiniband")).is_none());
    }

    #[test]
    fn a_missing_library_is_reported_with_the_loaders_reason() {
        let l = probe("libmemliner-no-such-library.so.1");
        assert!(!l.found);
        assert!(l.error.unwrap().contains("libmemliner-no-such-library"));
        // libc is always there.
        assert!(probe("libc.so.6").found);
    }
}
