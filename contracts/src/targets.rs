//! The metrics target file (`metrics_file=`), where a JVM says on which address it serves
//! `/metrics`.

/// The metrics target file (`metrics_file=`): one group of Prometheus's file-based discovery
/// format, `[{"targets": ["HOST:PORT"], "labels": {...}}]`. Written by the agent, read by
/// `memliner stats --every`, `memliner top`, the bench and the tests: defined once here.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TargetGroup {
    pub targets: Vec<String>,
    /// `pid`, `host`, and `job`/`instance` when given.
    pub labels: std::collections::BTreeMap<String, String>,
}

impl TargetGroup {
    /// The file's text: a list of one group.
    pub fn to_file(&self) -> String {
        serde_json::to_string(&[self]).unwrap_or_default() + "\n"
    }

    /// The group an agent wrote to `path`, once it has (`None` before, or for another file).
    pub fn read(path: &std::path::Path) -> Option<TargetGroup> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str::<Vec<TargetGroup>>(&text)
            .ok()?
            .into_iter()
            .next()
    }

    /// Where the JVM serves `/metrics`.
    pub fn addr(&self) -> Option<&str> {
        self.targets.first().map(String::as_str)
    }

    /// The JVM's pid.
    pub fn pid(&self) -> Option<u32> {
        self.labels.get("pid")?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_file_reads_back_as_written() {
        let mut g = TargetGroup {
            targets: vec!["127.0.0.1:9400".into()],
            ..Default::default()
        };
        g.labels.insert("pid".into(), "42".into());
        let path =
            std::env::temp_dir().join(format!("memliner-target-{}.json", std::process::id()));
        std::fs::write(&path, g.to_file()).unwrap();
        let back = TargetGroup::read(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(back, g);
        assert_eq!(
            (back.pid(), back.addr()),
            (Some(42), Some("127.0.0.1:9400"))
        );
        assert!(g
            .to_file()
            .starts_with("[{\"targets\":[\"127.0.0.1:9400\"]"));
        assert_eq!(TargetGroup::read(&path), None);
    }
}
