//! Where archive files live: a local directory (the default) or an S3-compatible bucket,
//! both through `object_store` for reading. S3 needs the cargo feature `s3` (object_store's
//! AWS client); the container image is built with it, and a build without it refuses an
//! `s3://` archive URL with an error that says so.
//!
//! Guarantees: [`ArchiveStore::put_durable`] returns only once the file is durable. Locally
//! that is a temp file in the target directory, written, fsynced, renamed into place and the
//! directory fsynced (new directories too), because `LocalFileSystem::put` renames without
//! fsync. On S3 it is the completed PUT. A crash before that leaves at most a temp file named
//! `<file>#<digits>`, which `object_store` listings skip and the next start removes.

use std::{
    fmt,
    io::Write,
    path::{Path as FsPath, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use clap::Args;
use futures::TryStreamExt;
#[cfg(feature = "s3")]
use object_store::aws::AmazonS3Builder;
use object_store::{
    local::LocalFileSystem, path::Path, ObjectMeta, ObjectStore, ObjectStoreExt, PutPayload,
};

/// Flags that say where the archive is; shared by the sink, `inspect` and `replay`.
#[derive(Debug, Clone, Args)]
pub struct ArchiveArgs {
    /// Where the archive is: a local directory (path or `file:///abs/path`) or
    /// `s3://bucket/prefix` (credentials and region from the standard AWS_* variables;
    /// in builds with the `s3` feature, as the container image is).
    #[arg(
        long,
        global = true,
        env = "HOOKLINE_ARCHIVE_URL",
        default_value = "./hookline-dlq-archive"
    )]
    pub archive_url: String,

    /// S3 endpoint for S3-compatible stores (e.g. `http://127.0.0.1:9000`); defaults to
    /// AWS_ENDPOINT_URL or AWS itself.
    #[arg(long, global = true, env = "HOOKLINE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// Allow a plain-http S3 endpoint (development stores only).
    #[arg(long, global = true, env = "HOOKLINE_S3_ALLOW_HTTP")]
    pub s3_allow_http: bool,

    /// S3 region; defaults to AWS_REGION / AWS_DEFAULT_REGION, else `us-east-1`.
    #[arg(long, global = true, env = "HOOKLINE_S3_REGION")]
    pub s3_region: Option<String>,
}

/// Why the archive store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// `--archive-url` is not usable.
    #[error("invalid --archive-url `{url}` (HOOKLINE_ARCHIVE_URL): {why}")]
    Url {
        /// The value given.
        url: String,
        /// What is wrong and how to fix it.
        why: String,
    },
    /// A local file operation failed.
    #[error("{op} {path}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An object store call failed.
    #[error("{op} {path} in {store}")]
    Object {
        /// What was being done.
        op: &'static str,
        /// The object path.
        path: String,
        /// The store.
        store: String,
        /// The cause (boxed: it is large).
        #[source]
        source: Box<object_store::Error>,
    },
    /// A blocking file task could not be joined.
    #[error("archive file task failed: {0}")]
    Join(String),
}

/// An opened archive: the store plus, when local, the directory it writes durably.
#[derive(Clone)]
pub struct ArchiveStore {
    store: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
    prefix: Path,
    display: String,
}

impl fmt::Debug for ArchiveStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

impl fmt::Display for ArchiveStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.display)
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What a build without the `s3` feature answers to an `s3://` archive URL. Compiled in
/// every build, so that `make` (which builds with S3) tests it too.
#[cfg_attr(feature = "s3", allow(dead_code))]
fn s3_not_built(url: &str) -> StoreError {
    StoreError::Url {
        url: url.to_owned(),
        why: "this build of hookline-dlq-sink has no S3 support (cargo feature `s3`); use a \
              local directory, the container image (built with S3), or a binary built with \
              `cargo build -p hookline-dlq-sink --features s3`"
            .into(),
    }
}

impl ArchiveStore {
    /// Opens the archive named by `args`. A local directory is created when `create` is set
    /// (the sink) and must exist otherwise (readers), so a typo is not an empty archive.
    pub fn open(args: &ArchiveArgs, create: bool) -> Result<Self, StoreError> {
        let url = args.archive_url.trim();
        let bad = |why: String| StoreError::Url {
            url: url.to_owned(),
            why,
        };
        if url.is_empty() {
            return Err(bad(
                "is empty; give a directory or s3://bucket/prefix".into()
            ));
        }
        if let Some(rest) = url.strip_prefix("s3://") {
            return Self::open_s3(args, url, rest);
        }
        if url.contains("://") && !url.starts_with("file://") {
            return Err(bad(
                "unsupported scheme; use a directory, file:///abs/path or s3://bucket/prefix"
                    .into(),
            ));
        }
        let dir = PathBuf::from(url.strip_prefix("file://").unwrap_or(url));
        if create {
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                op: "creating archive directory",
                path: dir.clone(),
                source,
            })?;
        } else if !dir.is_dir() {
            return Err(bad(format!("{} is not a directory", dir.display())));
        }
        let root = dir.canonicalize().map_err(|source| StoreError::Io {
            op: "resolving archive directory",
            path: dir.clone(),
            source,
        })?;
        let store = LocalFileSystem::new_with_prefix(&root).map_err(|e| bad(e.to_string()))?;
        Ok(Self {
            store: Arc::new(store),
            local_root: Some(root.clone()),
            prefix: Path::default(),
            display: root.display().to_string(),
        })
    }

    /// `s3://bucket/prefix`, `rest` being what follows the scheme.
    #[cfg(feature = "s3")]
    fn open_s3(args: &ArchiveArgs, url: &str, rest: &str) -> Result<Self, StoreError> {
        let bad = |why: String| StoreError::Url {
            url: url.to_owned(),
            why,
        };
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad("names no bucket; use s3://bucket/prefix".into()));
        }
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
        if let Some(endpoint) = &args.s3_endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if args.s3_allow_http {
            builder = builder.with_allow_http(true);
        }
        match &args.s3_region {
            Some(region) => builder = builder.with_region(region),
            None if std::env::var_os("AWS_REGION").is_none()
                && std::env::var_os("AWS_DEFAULT_REGION").is_none() =>
            {
                builder = builder.with_region("us-east-1");
            }
            None => {}
        }
        let store = builder.build().map_err(|e| bad(e.to_string()))?;
        let prefix =
            Path::parse(prefix.trim_matches('/')).map_err(|e| bad(format!("bad prefix: {e}")))?;
        Ok(Self {
            store: Arc::new(store),
            local_root: None,
            prefix,
            display: url.to_owned(),
        })
    }

    /// Without the `s3` feature there is no S3 client to open `s3://` with.
    #[cfg(not(feature = "s3"))]
    fn open_s3(_args: &ArchiveArgs, url: &str, _rest: &str) -> Result<Self, StoreError> {
        Err(s3_not_built(url))
    }

    /// The object path of `relative` (slash-separated, each part already safe).
    pub fn path(&self, relative: &str) -> Path {
        let mut parts: Vec<_> = self.prefix.parts().collect();
        parts.extend(
            relative
                .split('/')
                .filter(|s| !s.is_empty())
                .map(Into::into),
        );
        Path::from_iter(parts)
    }

    /// Writes `bytes` at `path` and returns once they are durable.
    pub async fn put_durable(&self, path: &Path, bytes: Bytes) -> Result<(), StoreError> {
        match &self.local_root {
            Some(root) => {
                let target = root.join(path.as_ref());
                tokio::task::spawn_blocking(move || write_synced(&target, &bytes))
                    .await
                    .map_err(|e| StoreError::Join(e.to_string()))?
            }
            None => self
                .store
                .put(path, PutPayload::from_bytes(bytes))
                .await
                .map(drop)
                .map_err(|source| self.object_err("writing", path, source)),
        }
    }

    /// Every file under `relative` (recursively), sorted by path.
    pub async fn list(&self, relative: &str) -> Result<Vec<ObjectMeta>, StoreError> {
        let prefix = self.path(relative);
        let mut files: Vec<ObjectMeta> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|source| self.object_err("listing", &prefix, source))?;
        files.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(files)
    }

    /// The whole content of one file.
    pub async fn get(&self, path: &Path) -> Result<Bytes, StoreError> {
        let result = self
            .store
            .get(path)
            .await
            .map_err(|source| self.object_err("reading", path, source))?;
        result
            .bytes()
            .await
            .map_err(|source| self.object_err("reading", path, source))
    }

    /// Removes temp files a crash left behind (local archives only).
    pub fn clean_temp_files(&self) -> usize {
        let Some(root) = &self.local_root else {
            return 0;
        };
        let mut removed = 0;
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if is_temp_name(&entry.file_name().to_string_lossy())
                    && std::fs::remove_file(&path).is_ok()
                {
                    removed += 1;
                }
            }
        }
        removed
    }

    fn object_err(&self, op: &'static str, path: &Path, source: object_store::Error) -> StoreError {
        StoreError::Object {
            op,
            path: path.to_string(),
            store: self.display.clone(),
            source: Box::new(source),
        }
    }
}

fn is_temp_name(name: &str) -> bool {
    name.rsplit_once('#')
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Temp file, write, fsync, rename, fsync the directory: the file is complete under its
/// final name or not there at all, and survives a power cut once this returns.
fn write_synced(target: &FsPath, bytes: &[u8]) -> Result<(), StoreError> {
    let io = |op: &'static str, path: &FsPath| {
        let path = path.to_owned();
        move |source| StoreError::Io { op, path, source }
    };
    let dir = target
        .parent()
        .ok_or_else(|| StoreError::Io {
            op: "finding the directory of",
            path: target.to_owned(),
            source: std::io::Error::other("no parent directory"),
        })?
        .to_owned();
    create_dirs_synced(&dir)?;
    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp = target.as_os_str().to_owned();
    temp.push(format!("#{}{n:06}", std::process::id()));
    let temp = PathBuf::from(temp);
    let result = (|| {
        let mut file = std::fs::File::create(&temp).map_err(io("creating", &temp))?;
        file.write_all(bytes).map_err(io("writing", &temp))?;
        file.sync_all().map_err(io("fsyncing", &temp))?;
        drop(file);
        std::fs::rename(&temp, target).map_err(io("renaming into place", target))?;
        sync_dir(&dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Creates `dir` and any missing parents, fsyncing each parent that gained an entry.
fn create_dirs_synced(dir: &FsPath) -> Result<(), StoreError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dirs_synced(parent)?;
    }
    match std::fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(source) => {
            return Err(StoreError::Io {
                op: "creating directory",
                path: dir.to_owned(),
                source,
            })
        }
    }
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

fn sync_dir(dir: &FsPath) -> Result<(), StoreError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|source| StoreError::Io {
            op: "fsyncing directory",
            path: dir.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(url: &str) -> ArchiveArgs {
        ArchiveArgs {
            archive_url: url.to_owned(),
            s3_endpoint: None,
            s3_allow_http: false,
            s3_region: None,
        }
    }

    #[tokio::test]
    async fn local_put_is_listed_and_read_back_and_temp_files_are_hidden() {
        let dir = tempfile::tempdir().unwrap();
        let store = ArchiveStore::open(&args(dir.path().to_str().unwrap()), false).unwrap();
        let path = store.path("kind=dlq/date=2026-11-29/tenant=a_3Ab/part-1.avro");
        store
            .put_durable(&path, Bytes::from_static(b"hello"))
            .await
            .unwrap();
        let stray = dir
            .path()
            .join("kind=dlq/date=2026-11-29/tenant=a_3Ab/part-2.avro#123000001");
        std::fs::write(&stray, b"torn").unwrap();
        let listed = store.list("kind=dlq").await.unwrap();
        assert_eq!(listed.len(), 1, "{listed:?}");
        assert_eq!(listed[0].location, path);
        assert_eq!(&store.get(&path).await.unwrap()[..], b"hello");
        assert_eq!(store.clean_temp_files(), 1);
        assert!(!stray.exists());
    }

    #[test]
    fn bad_urls_name_the_flag() {
        let missing = ArchiveStore::open(&args("/nonexistent/hookline-archive"), false);
        let err = missing.unwrap_err().to_string();
        assert!(err.contains("--archive-url"), "{err}");
        for url in ["", "s3://", "gs://bucket/x"] {
            let err = ArchiveStore::open(&args(url), false)
                .unwrap_err()
                .to_string();
            assert!(err.contains("--archive-url"), "{url}: {err}");
        }
    }

    #[cfg(feature = "s3")]
    #[test]
    fn s3_urls_split_bucket_and_prefix() {
        let mut a = args("s3://bucket/some/prefix/");
        a.s3_endpoint = Some("http://127.0.0.1:1".into());
        a.s3_allow_http = true;
        let store = ArchiveStore::open(&a, false).unwrap();
        assert_eq!(
            store.path("kind=dlq/x.avro").as_ref(),
            "some/prefix/kind=dlq/x.avro"
        );
    }

    #[test]
    fn s3_urls_without_the_s3_feature_say_how_to_get_it() {
        let urls = ["s3://bucket/some/prefix", "s3://"];
        for url in urls {
            let err = s3_not_built(url).to_string();
            for want in [
                url,
                "--archive-url",
                "feature `s3`",
                "--features s3",
                "image",
            ] {
                assert!(err.contains(want), "{url}: expected {want:?} in {err}");
            }
        }
        // A build without the feature answers `open` with exactly that error.
        if cfg!(not(feature = "s3")) {
            for url in urls {
                let err = ArchiveStore::open(&args(url), true).unwrap_err();
                assert_eq!(err.to_string(), s3_not_built(url).to_string());
            }
        }
    }
}
