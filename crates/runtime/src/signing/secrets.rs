//! Signing secrets from a directory — a Kubernetes Secret mount: one file per
//! `secret_ref`, one `whsec_...` per line (blank lines and `#` comments ignored),
//! every line an active key. The directory is re-read on a timer rather than
//! watched: Kubernetes swaps a `..data` symlink atomically, which inotify watchers
//! of the old files miss, while a re-read always sees the current content.
//!
//! Guarantees: a lookup returns the keys of the last complete read of the file; a
//! file that is missing or has a bad line is a per-delivery error for the refs that
//! name it, never a crash; secrets never appear in logs or errors.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::Duration,
};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{KeyError, SigningKey};

/// Why no key could be had for a `secret_ref`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("no secret file named `{secret_ref}` in the secrets directory")]
    Missing { secret_ref: String },
    #[error("secret file `{secret_ref}` line {line}: {reason}")]
    Invalid {
        secret_ref: String,
        line: usize,
        #[source]
        reason: KeyError,
    },
    #[error("secret file `{secret_ref}` has no key")]
    Empty { secret_ref: String },
}

type Entry = Result<Arc<[SigningKey]>, SecretError>;

/// The loaded secrets; cheap to clone, shared by every attempt.
#[derive(Debug, Clone)]
pub struct SecretStore {
    dir: PathBuf,
    inner: Arc<RwLock<Loaded>>,
}

#[derive(Debug, Default)]
struct Loaded {
    /// File contents as last read, to log only real changes.
    raw: HashMap<String, Vec<u8>>,
    entries: HashMap<String, Entry>,
}

impl SecretStore {
    /// Reads `dir` once. Fails only if the directory itself cannot be read, so a
    /// wrong `--secrets-dir` is caught at start.
    pub fn load(dir: impl Into<PathBuf>) -> std::io::Result<Self> {
        let store = Self {
            dir: dir.into(),
            inner: Arc::default(),
        };
        store.reload()?;
        Ok(store)
    }

    /// An in-memory store (tests, tools).
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let store = Self {
            dir: PathBuf::new(),
            inner: Arc::default(),
        };
        let mut loaded = Loaded::default();
        for (name, content) in entries {
            loaded
                .entries
                .insert(name.to_owned(), parse_file(name, content.as_bytes()));
            loaded
                .raw
                .insert(name.to_owned(), content.as_bytes().to_vec());
        }
        *store.write() = loaded;
        store
    }

    /// The active keys for `secret_ref`.
    pub fn get(&self, secret_ref: &str) -> Result<Arc<[SigningKey]>, SecretError> {
        let inner = self.inner.read().unwrap_or_else(|p| p.into_inner());
        inner.entries.get(secret_ref).cloned().unwrap_or_else(|| {
            Err(SecretError::Missing {
                secret_ref: secret_ref.to_owned(),
            })
        })
    }

    /// How many secret files are loaded (valid or not).
    pub fn len(&self) -> usize {
        self.inner
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .entries
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Re-reads the directory; returns whether anything changed.
    pub fn reload(&self) -> std::io::Result<bool> {
        let raw = read_dir(&self.dir)?;
        if raw == self.inner.read().unwrap_or_else(|p| p.into_inner()).raw {
            return Ok(false);
        }
        let entries: HashMap<String, Entry> = raw
            .iter()
            .map(|(name, content)| (name.clone(), parse_file(name, content)))
            .collect();
        for (name, entry) in &entries {
            if let Err(error) = entry {
                tracing::warn!(secret_ref = %name, %error, "unusable secret file");
            }
        }
        let count = entries.len();
        *self.write() = Loaded { raw, entries };
        tracing::info!(dir = %self.dir.display(), files = count, "signing secrets loaded");
        Ok(true)
    }

    /// Re-reads the directory every `interval` until `stop`. A read error keeps
    /// the previous secrets (a Secret mount is briefly inconsistent during a swap).
    pub fn watch(&self, interval: Duration, stop: CancellationToken) -> JoinHandle<()> {
        let store = self.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                let s = store.clone();
                match tokio::task::spawn_blocking(move || s.reload()).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        tracing::warn!(dir = %store.dir.display(), %error, "cannot re-read secrets; keeping the previous ones")
                    }
                    Err(error) => tracing::warn!(%error, "secrets reload task failed"),
                }
            }
        })
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Loaded> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// Regular files (following symlinks) whose names do not start with `.`: a
/// Kubernetes mount's `..data` and `..2024_...` entries are its machinery.
fn read_dir(dir: &Path) -> std::io::Result<HashMap<String, Vec<u8>>> {
    let mut files = HashMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if name.starts_with('.') {
            continue;
        }
        let path = entry.path();
        match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => {}
            _ => continue,
        }
        match std::fs::read(&path) {
            Ok(content) => {
                files.insert(name, content);
            }
            // Vanished between listing and reading: a swap in progress.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(files)
}

fn parse_file(name: &str, content: &[u8]) -> Entry {
    let text = String::from_utf8_lossy(content);
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key = SigningKey::parse(line).map_err(|reason| SecretError::Invalid {
            secret_ref: name.to_owned(),
            line: i + 1,
            reason,
        })?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err(SecretError::Empty {
            secret_ref: name.to_owned(),
        });
    }
    Ok(keys.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_comments_and_errors() {
        let store = SecretStore::from_entries([
            ("two", "# rotating\nwhsec_YWJj\n\nwhsec_ZGVm\n"),
            ("bad", "whsec_YWJj\nnot-a-secret\n"),
            ("blank", "\n# nothing\n"),
        ]);
        assert_eq!(store.get("two").unwrap().len(), 2);
        assert_eq!(
            store.get("bad").unwrap_err(),
            SecretError::Invalid {
                secret_ref: "bad".into(),
                line: 2,
                reason: KeyError::Prefix
            }
        );
        assert_eq!(
            store.get("blank").unwrap_err(),
            SecretError::Empty {
                secret_ref: "blank".into()
            }
        );
        assert_eq!(
            store.get("nope").unwrap_err(),
            SecretError::Missing {
                secret_ref: "nope".into()
            }
        );
        let shown = store.get("bad").unwrap_err().to_string();
        assert!(!shown.contains("YWJj") && !shown.contains("not-a-secret"));
    }

    #[test]
    fn reload_follows_a_kubernetes_style_symlink_swap() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let v1 = root.join("..2024_01");
        std::fs::create_dir(&v1).unwrap();
        std::fs::write(v1.join("acme"), "whsec_YWJj\n").unwrap();
        std::os::unix::fs::symlink("..2024_01", root.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/acme", root.join("acme")).unwrap();

        let store = SecretStore::load(root).unwrap();
        assert_eq!(
            store.len(),
            1,
            "only `acme`; the `..` entries are machinery"
        );
        assert_eq!(&*store.get("acme").unwrap(), &[SigningKey(b"abc".to_vec())]);
        assert!(!store.reload().unwrap(), "nothing changed");

        // Rotation: a new version directory, then an atomic rename of `..data`.
        let v2 = root.join("..2024_02");
        std::fs::create_dir(&v2).unwrap();
        std::fs::write(v2.join("acme"), "whsec_ZGVm\nwhsec_YWJj\n").unwrap();
        std::os::unix::fs::symlink("..2024_02", root.join("..data_tmp")).unwrap();
        std::fs::rename(root.join("..data_tmp"), root.join("..data")).unwrap();
        assert!(store.reload().unwrap());
        assert_eq!(store.get("acme").unwrap().len(), 2);

        std::fs::remove_file(root.join("acme")).unwrap();
        assert!(store.reload().unwrap());
        assert!(matches!(
            store.get("acme"),
            Err(SecretError::Missing { .. })
        ));
    }

    #[test]
    fn a_missing_directory_fails_at_load() {
        assert!(SecretStore::load("/nonexistent/hookline-secrets").is_err());
    }
}
