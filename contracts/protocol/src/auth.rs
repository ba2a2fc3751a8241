//! Secrets: the server's shared token and each namespace's session key.
//!
//! A namespace belongs to the connection that created it: the server hands that client a
//! random session key in the first hello's reply, and only a hello presenting the key (the
//! same client's other connections, or the owner reconnecting) attaches to the namespace
//! again. Tokens and keys are compared in constant time, so a client cannot learn a secret
//! byte by byte from how fast it is refused.

use std::fmt;

/// A namespace's session key.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SessionKey(pub [u8; 16]);

impl SessionKey {
    /// A fresh key from the kernel's random source.
    pub fn random() -> std::io::Result<SessionKey> {
        use std::io::Read;
        let mut b = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(SessionKey(b))
    }

    /// Whether `other` is this key, in time independent of where they differ.
    pub fn matches(&self, other: &SessionKey) -> bool {
        same_secret(&self.0, &other.0)
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A secret: never printed.
        f.write_str("SessionKey(..)")
    }
}

/// Whether two secrets are equal, comparing every byte whatever the first difference (the
/// lengths, which are not secret, may differ).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The token to use: the contents of `file` (trailing newline dropped) if given, else the
/// `MEMLINER_TOKEN` environment variable, else none. Never a command-line argument: a
/// long-lived process's command line is world-readable in /proc/PID/cmdline.
pub fn load_token(file: Option<&std::path::Path>) -> Result<Option<String>, String> {
    if let Some(f) = file {
        let t = std::fs::read_to_string(f)
            .map_err(|e| format!("cannot read the token file {}: {e}", f.display()))?;
        let t = t.trim_end_matches(['\n', '\r']).to_string();
        if t.is_empty() {
            return Err(format!("the token file {} is empty", f.display()));
        }
        return Ok(Some(t));
    }
    Ok(std::env::var("MEMLINER_TOKEN")
        .ok()
        .filter(|t| !t.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"sesame", b"sesame"));
        assert!(!same_secret(b"sesame", b"sesamf"));
        assert!(!same_secret(b"sesame", b"sesam"));
        assert!(same_secret(b"", b""));
        let (a, b) = (SessionKey::random().unwrap(), SessionKey::random().unwrap());
        assert!(a.matches(&a) && !a.matches(&b));
        assert_eq!(format!("{a:?}"), "SessionKey(..)");
    }

    #[test]
    fn tokens_come_from_a_file_never_the_command_line() {
        let dir = std::env::temp_dir().join(format!("memliner-token-{}", std::process::id()));
        std::fs::write(&dir, "s3cret\n").unwrap();
        assert_eq!(load_token(Some(&dir)).unwrap().as_deref(), Some("s3cret"));
        std::fs::write(&dir, "\n").unwrap();
        assert!(load_token(Some(&dir)).unwrap_err().contains("is empty"));
        std::fs::remove_file(&dir).unwrap();
        assert!(load_token(Some(&dir)).unwrap_err().contains("cannot read"));
    }
}
