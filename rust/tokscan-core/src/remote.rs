//! Inputs named by object-store URLs (`s3://bucket/prefix/`, `s3://bucket/key.parquet`; `gs://` and `az://`
//! through the same client): the objects are fetched with the `object_store` crate into a local staging
//! directory, keeping their names relative to the URL, and the ordinary readers then open them there — so a
//! prefix is discovered by the same shard-detection rules as a local directory (skipped objects named) and every
//! format reads exactly as it does from disk.
//!
//! Credentials, region and endpoint come from the store's standard environment variables (`AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_ENDPOINT_URL` / `AWS_ENDPOINT`,
//! `AWS_ALLOW_HTTP`; `GOOGLE_*`, `AZURE_*`), read by `object_store`'s `from_env` builders. No credential ever
//! reaches an error message: errors are rewritten into one line naming the URL, and any credential value that a
//! server echoed back is blanked out. Transient failures (5xx, timeouts, refused connections) are retried with
//! [`retry_config`]'s bound.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{
    BackoffConfig, GetOptions, ObjectStore, ObjectStoreExt, ObjectStoreScheme, RetryConfig,
};
use tokio::io::AsyncWriteExt;
use url::Url;

use crate::error::{Error, Result};

/// Schemes served (see `object_store::ObjectStoreScheme`).
const SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "adl", "azure", "abfs", "abfss"];

/// Requests in flight at once, over every object (whole small objects, or parts of large ones).
const CONCURRENCY: usize = 8;
/// An object larger than this is fetched as parts of this size, requested concurrently and written at their
/// offsets: one connection to S3 carries ~100 MB/s, and a NumPy token file is one object of gigabytes.
const PART_BYTES: u64 = 8 << 20;

/// Environment variables whose values must never appear in a message.
const SECRET_VARS: &[&str] = &[
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "GOOGLE_SERVICE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_SAS_KEY",
    "AZURE_CLIENT_SECRET",
];

/// True when `s` is an object-store URL this module serves (`s3://…`, `gs://…`, `az://…`).
pub fn is_url(s: &str) -> bool {
    s.split_once("://")
        .is_some_and(|(scheme, _)| SCHEMES.contains(&scheme.to_ascii_lowercase().as_str()))
}

/// The bound on retries of one request: 4 retries with exponential backoff from 100 ms, within 15 s overall
/// (`TOKSCAN_OBJECT_RETRIES` overrides the count).
pub fn retry_config() -> RetryConfig {
    let max_retries = std::env::var("TOKSCAN_OBJECT_RETRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(2),
            base: 2.0,
        },
        max_retries,
        retry_timeout: Duration::from_secs(15),
    }
}

/// What [`fetch`] staged for one URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    /// The local path to scan in place of the URL: the staging directory for a prefix, the file for an object.
    pub local: PathBuf,
    /// `local` + `/` stands for `url_base` in every path of the report (`s3://bucket/prefix/`).
    pub local_base: PathBuf,
    pub url_base: String,
    /// Objects fetched and their bytes.
    pub objects: usize,
    pub bytes: u64,
    /// The objects staged with only their footer or header ([`fetch`] with `footers`): files of the object's
    /// size whose other bytes are not there until [`fill_files`] fetches them.
    pub sparse: Vec<Sparse>,
    /// Every object staged, as the listing saw it: what [`fetch_listed`] needs to stage it again elsewhere.
    pub listed: Vec<Listed>,
}

/// An object as a listing saw it: its path under the staging directory and the version staged, so that
/// another process (a Ray task) stages the same bytes or fails.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Listed {
    /// Its path relative to the staging directory, `/`-separated (also relative to the URL base).
    pub rel: String,
    /// The object's key as the listing gave it (never re-parsed from a URL, which decodes `%` escapes and
    /// cuts `#` and `?`).
    pub key: String,
    pub size: u64,
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

/// An object staged with only its footer or header, and the version that part came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sparse {
    pub local: PathBuf,
    pub url: String,
    /// The object's key as the listing gave it (not re-parsed from `url`, which decodes `%` escapes).
    pub key: String,
    pub e_tag: Option<String>,
    pub version: Option<String>,
}

/// The URL a staged `path` stands for, when it is `local` (the staged copy of `url`) or under it (`url` a prefix):
/// its relative components joined to `url` by `/`.
pub fn url_of(path: &Path, local: &Path, url: &str) -> Option<String> {
    let rel = path.strip_prefix(local).ok()?;
    let mut out = url.to_string();
    for part in rel.components() {
        if !out.ends_with('/') {
            out.push('/');
        }
        out.push_str(&part.as_os_str().to_string_lossy());
    }
    Some(out)
}

/// `e` with a path at or under one of `places` (`(staged directory, URL base)`) written as the URL it stands for.
pub fn named_by_url(e: Error, places: &[(PathBuf, String)]) -> Error {
    e.relocated(|path| {
        places
            .iter()
            .find_map(|(local, url)| url_of(path, local, url))
            .map(PathBuf::from)
    })
}

/// Makes ring the process's TLS provider for the stores' HTTPS clients, once (the reqwest transport is built with
/// rustls and no bundled provider; a provider someone else installed first is kept).
fn install_tls() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if rustls::crypto::CryptoProvider::get_default().is_none() {
            // Err only when another thread installed one in between: theirs serves as well.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
    });
}

/// Variables holding the URL of an endpoint the S3 client talks to.
const AWS_URL_VARS: &[&str] = &[
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ENDPOINT_URL_STS",
    "AWS_METADATA_ENDPOINT",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];
/// Variables whose value the S3 client sends in a request header.
const AWS_HEADER_VARS: &[&str] = &["AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "AWS_TOKEN"];
/// Variables naming a region (part of the host name and of every signature).
const AWS_REGION_VARS: &[&str] = &["AWS_REGION", "AWS_DEFAULT_REGION"];

/// Refuses, naming the variable, an S3 setting the client cannot use: it would panic on building a request
/// (an endpoint that is not a URL, a header value holding a newline) rather than return an error. A
/// credential's value is never shown.
fn check_aws_settings() -> Result<()> {
    let set = |var: &str| std::env::var_os(var).map(|v| (var.to_string(), v));
    for (var, value) in AWS_URL_VARS.iter().filter_map(|v| set(v)) {
        let value = value.to_string_lossy();
        let bad = |why: &str| {
            Err(Error::Usage(format!(
                "{var}={value:?}: {why}; set it to the store's http:// or https:// URL, or unset it"
            )))
        };
        if value.trim().is_empty() {
            return bad("empty");
        }
        if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return bad("holds a space or a control character");
        }
        match Url::parse(&value) {
            Err(e) => return bad(&format!("not a URL ({e})")),
            Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                return bad("not an http:// or https:// URL")
            }
            Ok(u) if u.host_str().is_none_or(str::is_empty) => return bad("names no host"),
            Ok(_) => {}
        }
    }
    for (var, value) in AWS_HEADER_VARS.iter().filter_map(|v| set(v)) {
        let ok = value
            .to_str()
            .is_some_and(|v| !v.chars().any(|c| c.is_control()));
        if !ok {
            return Err(Error::Usage(format!(
                "{var} holds a control character (a newline?) or bytes that are not UTF-8: set it to the \
                 credential alone"
            )));
        }
    }
    for (var, value) in AWS_REGION_VARS.iter().filter_map(|v| set(v)) {
        let text = value.to_string_lossy();
        let ok = !text.is_empty()
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(Error::Usage(format!(
                "{var}={text:?}: not a region name (letters, digits, '-', '_' and '.', as in us-east-1); \
                 set it to the bucket's region, or unset it"
            )));
        }
    }
    Ok(())
}

fn store_for(url: &str) -> Result<(Arc<dyn ObjectStore>, ObjectPath)> {
    let (store, path, _) = stores_for(url)?;
    Ok((store, path))
}

/// A store as an object store and as a paginated lister (for a bounded listing), and the path under it.
type Stores = (
    Arc<dyn ObjectStore>,
    ObjectPath,
    Arc<dyn object_store::list::PaginatedListStore>,
);

/// The store of `url` ([`Stores`]).
fn stores_for(url: &str) -> Result<Stores> {
    install_tls();
    let parsed =
        Url::parse(url).map_err(|e| remote_error(url, format!("not a valid URL ({e})")))?;
    let (scheme, path) = ObjectStoreScheme::parse(&parsed)
        .map_err(|e| remote_error(url, format!("not an object-store URL ({e})")))?;
    fn both<S: ObjectStore + object_store::list::PaginatedListStore>(
        s: S,
    ) -> (
        Arc<dyn ObjectStore>,
        Arc<dyn object_store::list::PaginatedListStore>,
    ) {
        let s = Arc::new(s);
        (s.clone(), s)
    }
    let built = match scheme {
        ObjectStoreScheme::AmazonS3 => {
            check_aws_settings()?;
            object_store::aws::AmazonS3Builder::from_env()
                .with_url(url)
                .with_retry(retry_config())
                .build()
                .map(both)
        }
        ObjectStoreScheme::GoogleCloudStorage => {
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry_config())
                .build()
                .map(both)
        }
        ObjectStoreScheme::MicrosoftAzure => object_store::azure::MicrosoftAzureBuilder::from_env()
            .with_url(url)
            .with_retry(retry_config())
            .build()
            .map(both),
        _ => {
            return Err(remote_error(
                url,
                "not an object-store URL (s3://, gs:// or az://)".to_string(),
            ))
        }
    };
    let (store, pages) = built.map_err(|e| describe(url, &e))?;
    Ok((store, path, pages))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Usage(format!("cannot start the object-store client: {e}")))
}

/// Fetches what `url` names into `dest` (created if needed): one object, or every object under a prefix (a URL
/// ending in `/`, or one that names no object), at its path relative to the prefix. On an error `dest` may hold
/// files of the final size with parts missing: use a directory of its own and remove it (the Python caller
/// stages into a temporary directory).
///
/// With `footers`, an object larger than [`SPARSE_MIN`] that its reader opens from a small part is staged as a
/// file of its size holding only that part: a Parquet file (by its `.parquet` name; not a NumPy directory's
/// `meta.parquet`) its footer (ranged reads of its tail), a NumPy directory's `tokens.npy` and `loss_mask.npy`
/// their header (the first [`HEAD`] bytes), a Megatron `.bin` beside its `.idx` its first [`HEAD`] bytes.
/// Opening the corpus reads nothing else, and [`fill_files`] fetches what some rows need (`show --row`, a Ray
/// task's units).
pub fn fetch(url: &str, dest: &Path, footers: bool) -> Result<Staged> {
    let (store, path, pages) = stores_for(url)?;
    let rt = runtime()?;
    rt.block_on(fetch_async(url, store, pages, path, dest, footers))
}

/// The setting that bounds a listing: at most this many objects (default [`MAX_OBJECTS`]), in at most a hundredth
/// as many pages (and at least [`MIN_PAGES`]).
pub const MAX_OBJECTS_VAR: &str = "TOKSCAN_MAX_OBJECTS";
pub const MAX_OBJECTS: u64 = 1_000_000;
const MIN_PAGES: u64 = 1_000;

/// Every object under `path` (the prefix `url` names), page by page: a server that hands back a continuation
/// token it gave before (its listing would never end), or more objects or pages than [`MAX_OBJECTS_VAR`] allows,
/// is an error naming `url`, never an endless loop.
async fn list_bounded(
    url: &str,
    pages: &dyn object_store::list::PaginatedListStore,
    path: &ObjectPath,
) -> Result<Vec<object_store::ObjectMeta>> {
    let max_objects = crate::settings::count(MAX_OBJECTS_VAR)?.unwrap_or(MAX_OBJECTS);
    let max_pages = (max_objects / 100).max(MIN_PAGES);
    // The trailing `/` that `ObjectStore::list` adds: `prefix` lists `prefix/…`, not `prefix-other/…`.
    let prefix = (!path.as_ref().is_empty()).then(|| format!("{}/", path.as_ref()));
    let mut listing = Vec::new();
    let mut tokens = std::collections::HashSet::new();
    let mut token: Option<String> = None;
    for page in 1.. {
        let got = pages
            .list_paginated(
                prefix.as_deref(),
                object_store::list::PaginatedListOptions {
                    page_token: token.take(),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| describe(url, &e))?;
        listing.extend(got.result.objects);
        if listing.len() as u64 > max_objects {
            return Err(remote_error(
                url,
                format!(
                    "the listing holds more than {max_objects} objects ({MAX_OBJECTS_VAR}=N reads a larger prefix)"
                ),
            ));
        }
        let Some(next) = got.page_token.filter(|t| !t.is_empty()) else {
            break;
        };
        if !tokens.insert(next.clone()) {
            return Err(remote_error(
                url,
                format!(
                    "the server's listing does not end: page {} repeats a continuation token it gave before",
                    page + 1
                ),
            ));
        }
        if page >= max_pages {
            return Err(remote_error(
                url,
                format!(
                    "the listing goes on past {max_pages} pages ({} objects so far; {MAX_OBJECTS_VAR}=N allows N \
                     objects in N/100 pages)",
                    listing.len()
                ),
            ));
        }
        token = Some(next);
    }
    Ok(listing)
}

/// Stages `objects` (listed by an earlier [`fetch`] whose URL base was `url_base`) into `dest` at their relative
/// paths, as [`fetch`] with `footers` does, each pinned to the version listed: an object overwritten since is an
/// error (`…: the object was overwritten while it was read`), never a mix of versions. Nothing is listed again.
pub fn fetch_listed(
    url_base: &str,
    objects: &[Listed],
    dest: &Path,
    footers: bool,
) -> Result<Staged> {
    let (store, _) = store_for(url_base)?;
    let listing = objects
        .iter()
        .map(|o| {
            let url = format!("{url_base}{}", o.rel);
            let meta = object_meta(&url, &o.key, o.size, &o.e_tag, &o.version)?;
            Ok((meta, o.rel.clone()))
        })
        .collect::<Result<Vec<_>>>()?;
    let rt = runtime()?;
    let (bytes, sparse, listed) = rt
        .block_on(stage(store, listing, url_base, dest, footers))
        .map_err(|e| named_by_url(e, &[(dest.to_path_buf(), url_base.to_string())]))?;
    Ok(Staged {
        local: dest.to_path_buf(),
        local_base: dest.to_path_buf(),
        url_base: url_base.to_string(),
        objects: objects.len(),
        bytes,
        sparse,
        listed,
    })
}

/// The most parts a multipart upload may have (S3, GCS).
const MAX_PARTS: u64 = 10_000;

/// An object at most this large is fetched whole even for its footer or header.
pub const SPARSE_MIN: u64 = 1 << 20;
/// The head of a `.npy` array staged sparse: what its reader reads of it on opening (the header).
const HEAD: u64 = 64 << 10;
/// The tail of a Parquet object fetched first for its footer (most footers fit; a larger one takes a second
/// request).
const FOOTER_TAIL: u64 = 64 << 10;

/// The byte ranges of `source`'s files that reading its local `rows` needs ([`crate::source::Source::byte_ranges`]),
/// for [`fill_files`]; an error when a file of a format that reads its files whole was staged sparse among
/// `staged`.
pub fn needed(
    staged: &[Sparse],
    source: &dyn crate::source::Source,
    rows: std::ops::Range<u64>,
) -> Result<Vec<crate::source::FileRange>> {
    match source.byte_ranges(rows) {
        Some(ranges) => Ok(ranges),
        None if staged.iter().any(|s| s.local.starts_with(source.path())) => Err(Error::invalid(
            source.path(),
            "staged without its data for a format that reads the whole file",
        )),
        None => Ok(Vec::new()),
    }
}

/// Fetches the byte ranges `wanted` of the sparse objects among `staged` into the same offsets of their local
/// files (ranges of any other file are there already: it was staged whole), from the version each footer or
/// header came from (an object overwritten since is an error, not a mix): adjacent ranges merged, in parts of
/// at most [`PART_BYTES`], [`CONCURRENCY`] requests in flight over every file. Returns the bytes fetched.
pub fn fill_files(staged: &[Sparse], wanted: &[crate::source::FileRange]) -> Result<u64> {
    let mut jobs = Vec::new();
    for s in staged {
        let mut ranges: Vec<std::ops::Range<u64>> = wanted
            .iter()
            .filter(|(file, _)| *file == s.local)
            .map(|(_, r)| r.clone())
            .filter(|r| r.end > r.start)
            .collect();
        if ranges.is_empty() {
            continue;
        }
        ranges.sort_by_key(|r| r.start);
        let mut merged: Vec<std::ops::Range<u64>> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match merged.last_mut() {
                Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
                _ => merged.push(r),
            }
        }
        let (store, _) = store_for(&s.url)?;
        // The sparse file has the object's size: no HEAD.
        let size = std::fs::metadata(&s.local)
            .map_err(|e| Error::io(&s.local, e))?
            .len();
        let object = Arc::new(Object {
            url: s.url.clone(),
            meta: object_meta(&s.url, &s.key, size, &s.e_tag, &s.version)?,
            target: s.local.clone(),
        });
        for r in merged {
            jobs.extend((r.start..r.end).step_by(PART_BYTES as usize).map(|start| {
                let part = start..(start + PART_BYTES).min(r.end);
                (Arc::clone(&store), Arc::clone(&object), part)
            }));
        }
    }
    if jobs.is_empty() {
        return Ok(0);
    }
    let bytes = jobs.iter().map(|(_, _, r)| r.end - r.start).sum();
    let rt = runtime()?;
    rt.block_on(
        futures_util::stream::iter(jobs.into_iter().map(|(store, object, range)| async move {
            fetch_part(store.as_ref(), &object, range).await
        }))
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<()>>(),
    )?;
    Ok(bytes)
}

/// The metadata of a listed object (its key as listed, its size and version), for requests pinned to it.
fn object_meta(
    url: &str,
    key: &str,
    size: u64,
    e_tag: &Option<String>,
    version: &Option<String>,
) -> Result<object_store::ObjectMeta> {
    let location = ObjectPath::parse(key)
        .map_err(|e| remote_error(url, format!("not an object key ({e})")))?;
    Ok(object_store::ObjectMeta {
        location,
        last_modified: Default::default(),
        size,
        e_tag: e_tag.clone(),
        version: version.clone(),
    })
}

/// Stages `object` with only its footer: the tail, then the rest of the footer when the tail does not hold it.
async fn fetch_footer(store: &dyn ObjectStore, object: &Object) -> Result<u64> {
    let size = object.meta.size;
    let tail = FOOTER_TAIL.min(size);
    fetch_part(store, object, size - tail..size).await?;
    let mut end = [0u8; 8];
    {
        use std::io::{Read, Seek, SeekFrom};
        let mut file =
            std::fs::File::open(&object.target).map_err(|e| Error::io(&object.target, e))?;
        file.seek(SeekFrom::Start(size - 8))
            .and_then(|_| file.read_exact(&mut end))
            .map_err(|e| Error::io(&object.target, e))?;
    }
    if &end[4..] != b"PAR1" {
        // Not Parquet after all: the reader says so on the whole object.
        fetch_part(store, object, 0..size - tail).await?;
        return Ok(size);
    }
    let footer = u64::from(u32::from_le_bytes(end[..4].try_into().expect("4 bytes"))) + 8;
    if footer > tail {
        fetch_part(store, object, size - footer.min(size)..size - tail).await?;
        return Ok(footer.min(size));
    }
    Ok(tail)
}

async fn fetch_async(
    url: &str,
    store: Arc<dyn ObjectStore>,
    pages: Arc<dyn object_store::list::PaginatedListStore>,
    path: ObjectPath,
    dest: &Path,
    footers: bool,
) -> Result<Staged> {
    std::fs::create_dir_all(dest).map_err(|e| Error::io(dest, e))?;
    // One object when the URL names one (a HEAD request), else a prefix.
    let single = if url.ends_with('/') || path.as_ref().is_empty() {
        None
    } else {
        match store.head(&path).await {
            Ok(meta) => Some(meta),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => return Err(describe(url, &e)),
        }
    };
    let is_single = single.is_some();
    let (listing, prefix_len, url_base) = match single {
        Some(meta) => {
            let name = path.filename().unwrap_or_default().to_string();
            let base_len = path.as_ref().len() - name.len();
            let url_base = url[..url.len() - name.len()].to_string();
            (vec![meta], base_len, url_base)
        }
        None => {
            let mut listing = list_bounded(url, pages.as_ref(), &path).await?;
            let (url_base, prefix_len) = prefix_of(url, &path);
            // A console's "folder" markers (empty objects named like the prefix or a folder under it) name no
            // file.
            let folders: std::collections::HashSet<String> = listing
                .iter()
                .flat_map(|m| {
                    let key = m.location.as_ref();
                    key.match_indices('/')
                        .map(move |(i, _)| key[..i].to_string())
                })
                .collect();
            listing.retain(|m| {
                m.location.as_ref().len() > prefix_len
                    && !(m.size == 0 && folders.contains(m.location.as_ref()))
            });
            if listing.is_empty() {
                return Err(remote_error(url, "no such object or prefix".to_string()));
            }
            (listing, prefix_len, url_base)
        }
    };
    let listing = listing
        .into_iter()
        .map(|m| {
            let rel = m.location.as_ref()[prefix_len..].to_string();
            (m, rel)
        })
        .collect();
    // The objects sit under the folders of their keys, as files sit under theirs on disk: a hive-style
    // `category=NAME` folder named by the URL itself still gives the rows their category.
    let folders = path.as_ref().get(..prefix_len).unwrap_or(path.as_ref());
    let base = folders
        .split('/')
        .filter(|part| !part.is_empty())
        .fold(dest.to_path_buf(), |p, part| p.join(part));
    // An error on a staged file (a key that cannot be a file beside another, a full disk) names the object.
    let (bytes, sparse, listed) = stage(store, listing, &url_base, &base, footers)
        .await
        .map_err(|e| named_by_url(e, &[(base.clone(), url_base.clone())]))?;
    let local = match is_single {
        true => base.join(path.filename().expect("a single object has a file name")),
        false => base.clone(),
    };
    Ok(Staged {
        local,
        local_base: base,
        url_base,
        objects: listed.len(),
        bytes,
        sparse,
        listed,
    })
}

/// Stages `listing` (each object with its path relative to `dest` and to `url_base`) into `dest`: see [`fetch`].
/// Returns the bytes fetched, the objects staged sparse, and every object as [`Listed`].
async fn stage(
    store: Arc<dyn ObjectStore>,
    listing: Vec<(object_store::ObjectMeta, String)>,
    url_base: &str,
    dest: &Path,
    footers: bool,
) -> Result<(u64, Vec<Sparse>, Vec<Listed>)> {
    std::fs::create_dir_all(dest).map_err(|e| Error::io(dest, e))?;
    /// One request's work: a whole small object, a part of a large one, or a sparse object's footer or head.
    enum Job {
        Whole,
        Part(std::ops::Range<u64>),
        Footer,
        Head,
    }
    let mut jobs = Vec::new();
    let mut sparse = Vec::new();
    // A NumPy directory's `meta.parquet` is read whole by its reader: folders holding a `tokens.npy` stage
    // their Parquet files whole.
    let numpy_dirs: std::collections::HashSet<&str> = listing
        .iter()
        .filter_map(|(m, _)| m.location.as_ref().strip_suffix("tokens.npy"))
        .filter(|dir| dir.is_empty() || dir.ends_with('/'))
        .collect();
    // A Megatron `.bin` (its `.idx` beside it) is read by the element ranges of its rows: staged sparse too.
    let keys: std::collections::HashSet<&str> =
        listing.iter().map(|(m, _)| m.location.as_ref()).collect();
    let megatron_bins: std::collections::HashSet<&str> = listing
        .iter()
        .map(|(m, _)| m.location.as_ref())
        .filter(|k| {
            k.strip_suffix(".bin")
                .is_some_and(|stem| keys.contains(format!("{stem}.idx").as_str()))
        })
        .collect();
    for (meta, rel) in &listing {
        let target = rel
            .split('/')
            .fold(dest.to_path_buf(), |p, part| p.join(part));
        let name = meta.location.filename().unwrap_or_default();
        let dir = &meta.location.as_ref()[..meta.location.as_ref().len() - name.len()];
        let footer_only = footers
            && meta.size > SPARSE_MIN
            && (name.ends_with(".parquet") || name.ends_with(".pq"))
            && !numpy_dirs.contains(dir);
        let head_only = footers
            && meta.size > SPARSE_MIN
            && ((name == "tokens.npy" || name == "loss_mask.npy") && numpy_dirs.contains(dir)
                || megatron_bins.contains(meta.location.as_ref()));
        if meta.size > PART_BYTES || footer_only || head_only {
            prepare(&target, meta.size)?;
        }
        let object = Arc::new(Object {
            url: format!("{url_base}{rel}"),
            meta: meta.clone(),
            target,
        });
        if footer_only || head_only {
            sparse.push(Sparse {
                local: object.target.clone(),
                url: object.url.clone(),
                key: meta.location.to_string(),
                e_tag: meta.e_tag.clone(),
                version: meta.version.clone(),
            });
            jobs.push((object, if footer_only { Job::Footer } else { Job::Head }));
        } else if meta.size <= PART_BYTES {
            jobs.push((object, Job::Whole));
        } else {
            jobs.extend((0..meta.size).step_by(PART_BYTES as usize).map(|start| {
                (
                    Arc::clone(&object),
                    Job::Part(start..(start + PART_BYTES).min(meta.size)),
                )
            }));
        }
    }
    // Every request of every object in one stream, so that at most CONCURRENCY are in flight (and at most
    // CONCURRENCY parts of PART_BYTES are held in memory) however many large objects the prefix holds.
    let fetched: Vec<u64> = futures_util::stream::iter(jobs.into_iter().map(|(object, job)| {
        let store = Arc::clone(&store);
        async move {
            match job {
                Job::Whole => stream_to(store.as_ref(), &object)
                    .await
                    .map(|()| object.meta.size),
                Job::Part(range) => {
                    let n = range.end - range.start;
                    fetch_part(store.as_ref(), &object, range).await.map(|()| n)
                }
                Job::Footer => fetch_footer(store.as_ref(), &object).await,
                Job::Head => {
                    let n = HEAD.min(object.meta.size);
                    fetch_part(store.as_ref(), &object, 0..n).await.map(|()| n)
                }
            }
        }
    }))
    .buffer_unordered(CONCURRENCY)
    .try_collect()
    .await?;
    let listed = listing
        .into_iter()
        .map(|(m, rel)| Listed {
            rel,
            key: m.location.to_string(),
            size: m.size,
            e_tag: m.e_tag,
            version: m.version,
        })
        .collect();
    Ok((fetched.iter().sum(), sparse, listed))
}

/// Uploads every file under `dir` to the prefix `url` names (`s3://bucket/prefix/`), each at its path relative
/// to `dir`: one `PUT` for a file of at most [`PART_BYTES`], a multipart upload of such parts for a larger one,
/// at most [`CONCURRENCY`] requests in flight. A prefix that already holds an object is refused before anything
/// is written (an output never overwrites or mixes with what is there). Returns the objects and bytes written.
///
/// `last` (a file name at the top of `dir`: `tokscan clean`'s manifest) is written once every other object is,
/// so that a prefix without it is an interrupted copy.
pub fn upload(dir: &Path, url: &str, last: Option<&str>) -> Result<(usize, u64)> {
    let (store, base) = store_for(url)?;
    let mut files = Vec::new();
    collect_files(dir, &mut files)?;
    files.sort();
    let rt = runtime()?;
    rt.block_on(async {
        let (url_base, prefix_len) = prefix_of(url, &base);
        let mut existing = store.list(Some(&base));
        match existing.next().await {
            None => {}
            Some(Ok(meta)) => {
                let rel = meta.location.as_ref().get(prefix_len..).unwrap_or_default();
                return Err(remote_error(
                    url,
                    format!(
                        "exists and is not empty (it holds {url_base}{rel}): name a new prefix"
                    ),
                ));
            }
            Some(Err(e)) => return Err(describe(url, &e)),
        }
        let mut bytes = 0u64;
        let mut jobs = Vec::new();
        for file in &files {
            let rel = file.strip_prefix(dir).expect("collected under dir");
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            // The key as the file is named (parsed, not percent-encoded part by part: a `category=数学` folder
            // keeps its name).
            let key = match base.as_ref() {
                "" => parts.join("/"),
                b => format!("{b}/{}", parts.join("/")),
            };
            let location = ObjectPath::parse(&key)
                .map_err(|e| remote_error(url, format!("cannot name an object {key:?} ({e})")))?;
            let size = std::fs::metadata(file)
                .map_err(|e| Error::io(file, e))?
                .len();
            bytes += size;
            jobs.push((
                file.clone(),
                location,
                format!("{url_base}{}", parts.join("/")),
                size,
            ));
        }
        let n = jobs.len();
        let last = last
            .and_then(|name| jobs.iter().position(|(f, ..)| *f == dir.join(name)))
            .map(|i| jobs.remove(i));
        // Every upload runs to its end (a failed multipart upload is aborted, not left open), then the first
        // error is the answer.
        let results: Vec<Result<()>> = futures_util::stream::iter(jobs.into_iter().map(
            |(file, location, object_url, size)| {
                let store = Arc::clone(&store);
                async move { put_file(store.as_ref(), &file, &location, &object_url, size).await }
            },
        ))
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
        results.into_iter().collect::<Result<Vec<()>>>()?;
        if let Some((file, location, object_url, size)) = last {
            put_file(store.as_ref(), &file, &location, &object_url, size).await?;
        }
        Ok((n, bytes))
    })
}

/// The prefix URL `url` with its trailing `/` (`s3://bucket/prefix/`), and the bytes of a key under `base` (its
/// object path) that name the prefix, `/` included.
fn prefix_of(url: &str, base: &ObjectPath) -> (String, usize) {
    let url_base = if url.ends_with('/') {
        url.to_string()
    } else {
        format!("{url}/")
    };
    let base = base.as_ref();
    (url_base, if base.is_empty() { 0 } else { base.len() + 1 })
}

/// Every file under `dir`, recursively.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        if path.is_dir() {
            collect_files(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Writes one local file to `location`: in one request, or in parts of [`PART_BYTES`] read one at a time.
async fn put_file(
    store: &dyn ObjectStore,
    file: &Path,
    location: &ObjectPath,
    url: &str,
    size: u64,
) -> Result<()> {
    if size <= PART_BYTES {
        let data = crate::files::read(file)?;
        store
            .put(location, data.into())
            .await
            .map_err(|e| describe(url, &e))?;
        return Ok(());
    }
    let upload = store
        .put_multipart(location)
        .await
        .map_err(|e| describe(url, &e))?;
    // Parts of 8 MiB, larger for a file past 10,000 of them (the stores' limit on parts).
    let part = PART_BYTES.max(size.div_ceil(MAX_PARTS)) as usize;
    let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, part);
    let mut reader = match std::fs::File::open(file) {
        Ok(r) => r,
        Err(e) => {
            let _ = writer.abort().await;
            return Err(Error::io(file, e));
        }
    };
    let mut chunk = vec![0u8; part];
    loop {
        // At most two parts in flight for this file (the stream bounds the files).
        if let Err(e) = writer.wait_for_capacity(2).await {
            let _ = writer.abort().await;
            return Err(describe(url, &e));
        }
        let n = match read_full(&mut reader, &mut chunk) {
            Ok(n) => n,
            Err(e) => {
                let _ = writer.abort().await;
                return Err(Error::io(file, e));
            }
        };
        if n == 0 {
            break;
        }
        writer.write(&chunk[..n]);
    }
    // `finish` aborts the upload itself when a part failed.
    writer.finish().await.map_err(|e| describe(url, &e))?;
    Ok(())
}

/// Reads until `buf` is full or the file ends; the bytes read.
fn read_full(reader: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut n = 0;
    while n < buf.len() {
        match reader.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// One object being fetched: where it goes, and the listing's metadata every part is pinned to. (No open
/// file: each request opens its own, so that at most `CONCURRENCY` are open however many objects there are.)
struct Object {
    url: String,
    meta: object_store::ObjectMeta,
    target: PathBuf,
}

/// Creates `target` (and its parent directories) at `size` bytes, for parts to be written at their offsets.
fn prepare(target: &Path, size: u64) -> Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent).map_err(|e| Error::io(parent, e))?;
    }
    let file = std::fs::File::create(target).map_err(|e| Error::io(target, e))?;
    file.set_len(size).map_err(|e| Error::io(target, e))
}

/// The request options of one part: its range, pinned to the version the listing saw ([`pinned`]).
fn part_options(meta: &object_store::ObjectMeta, range: std::ops::Range<u64>) -> GetOptions {
    pinned(meta).with_range(Some(range))
}

/// A GET of the version the listing saw, so that an object overwritten meanwhile fails instead of mixing
/// versions: `If-Match` its ETag, or, for a store that gives none, its version id (which a versioned bucket's
/// read-only policy must allow, `s3:GetObjectVersion`: used only without an ETag).
fn pinned(meta: &object_store::ObjectMeta) -> GetOptions {
    let version = match meta.e_tag {
        Some(_) => None,
        None => meta.version.clone(),
    };
    GetOptions::new()
        .with_if_match(meta.e_tag.clone())
        .with_version(version)
}

/// Fetches bytes `range` of an object larger than [`PART_BYTES`] and writes them at their offset.
async fn fetch_part(
    store: &dyn ObjectStore,
    object: &Object,
    range: std::ops::Range<u64>,
) -> Result<()> {
    let url = object.url.as_str();
    let got = store
        .get_opts(
            &object.meta.location,
            part_options(&object.meta, range.clone()),
        )
        .await
        .map_err(|e| describe(url, &e))?
        .bytes()
        .await
        .map_err(|e| describe(url, &e))?;
    let want = range.end - range.start;
    if got.len() as u64 != want {
        return Err(remote_error(
            url,
            format!(
                "the object changed while it was read (bytes {}..{} gave {} bytes)",
                range.start,
                range.end,
                got.len()
            ),
        ));
    }
    let target = &object.target;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(target)
        .map_err(|e| Error::io(target, e))?;
    write_at(&file, &got, range.start).map_err(|e| Error::io(target, e))
}

/// Writes all of `buf` at `offset` of `file` without moving a shared cursor (parts land concurrently).
#[cfg(unix)]
fn write_at(file: &std::fs::File, buf: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, buf, offset)
}

#[cfg(windows)]
fn write_at(file: &std::fs::File, mut buf: &[u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, buf, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Streams an object of at most [`PART_BYTES`] into its file in one request.
async fn stream_to(store: &dyn ObjectStore, object: &Object) -> Result<()> {
    let (url, target) = (object.url.as_str(), object.target.as_path());
    // Pinned to the version listed, as parts are: a task staging the planner's objects reads what it planned.
    let got = store
        .get_opts(&object.meta.location, pinned(&object.meta))
        .await
        .map_err(|e| describe(url, &e))?;
    if let Some(parent) = target.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(|e| Error::io(parent, e))?;
    }
    let mut file = tokio::fs::File::create(target)
        .await
        .map_err(|e| Error::io(target, e))?;
    let mut stream = got.into_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| describe(url, &e))?;
        file.write_all(&chunk)
            .await
            .map_err(|e| Error::io(target, e))?;
    }
    file.flush().await.map_err(|e| Error::io(target, e))?;
    Ok(())
}

fn remote_error(url: &str, message: String) -> Error {
    Error::Remote {
        url: url.to_string(),
        message: scrub(&message),
    }
}

/// One line for an object-store error, by kind; the client's own text (first line, credentials blanked) for the
/// rest (network failures after the retries, server errors).
fn describe(url: &str, e: &object_store::Error) -> Error {
    use object_store::Error as E;
    let message = match e {
        E::NotFound { .. } => "no such bucket or object".to_string(),
        E::Precondition { .. } => {
            "the object was overwritten while it was read (run the command again)".to_string()
        }
        E::PermissionDenied { .. } => {
            "access denied (check the credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
                .to_string()
        }
        E::Unauthenticated { .. } => {
            "credentials refused (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)".to_string()
        }
        other => {
            let mut text = String::new();
            let mut cur: Option<&dyn std::error::Error> = Some(other);
            // The innermost causes say what happened (connection refused, the server's error code).
            while let Some(err) = cur {
                let s = err.to_string();
                if !text.contains(&s) {
                    if !text.is_empty() {
                        text.push_str(": ");
                    }
                    text.push_str(&s);
                }
                cur = err.source();
            }
            let lower = text.to_ascii_lowercase();
            if lower.contains("nosuchbucket") {
                "no such bucket".to_string()
            } else if lower.contains("invalidaccesskeyid")
                || lower.contains("signaturedoesnotmatch")
                || lower.contains("accessdenied")
                || lower.contains("403 forbidden")
            {
                "access denied (check the credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)"
                    .to_string()
            } else {
                text
            }
        }
    };
    remote_error(url, message)
}

/// `message` on one line, with the value of every credential variable blanked out.
fn scrub(message: &str) -> String {
    let mut out = message.split_whitespace().collect::<Vec<_>>().join(" ");
    for var in SECRET_VARS {
        if let Ok(v) = std::env::var(var) {
            if v.len() >= 4 {
                out = out.replace(&v, "***");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_recognised_by_scheme() {
        assert!(is_url("s3://bucket/prefix/"));
        assert!(is_url("S3://bucket/key.parquet"));
        assert!(is_url("gs://bucket/x"));
        assert!(is_url("az://container/x"));
        assert!(!is_url("/data/shards"));
        assert!(!is_url("http://example.com/x"));
        assert!(!is_url("shards/s3:/x"));
    }

    #[test]
    fn retries_are_bounded() {
        let r = retry_config();
        assert!(r.max_retries <= 10);
        assert!(r.retry_timeout <= Duration::from_secs(60));
    }

    #[test]
    fn messages_are_one_line() {
        assert_eq!(scrub("a\nb  c"), "a b c");
    }

    /// The error of fetching `object` of `url` from an S3 store at `endpoint`, with test credentials and no
    /// retries.
    fn fetch_error(url: &str, endpoint: &str, object: &str) -> String {
        install_tls();
        let store = object_store::aws::AmazonS3Builder::new()
            .with_url(url)
            .with_region("us-east-1")
            .with_endpoint(endpoint)
            .with_allow_http(true)
            .with_access_key_id("AKIDEXAMPLE")
            .with_secret_access_key("not-a-real-secret")
            .with_retry(RetryConfig {
                max_retries: 0,
                ..retry_config()
            })
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(store);
        runtime()
            .unwrap()
            .block_on(fetch_async(
                url,
                store.clone(),
                store,
                ObjectPath::from(object),
                dir.path(),
                false,
            ))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn a_refused_connection_is_one_line_naming_the_url() {
        std::env::set_var("TOKSCAN_OBJECT_RETRIES", "0");
        let url = "s3://bucket/prefix/";
        let err = fetch_error(url, "http://127.0.0.1:9", "prefix");
        assert!(err.starts_with("s3://bucket/prefix/: "), "{err}");
        assert!(!err.contains('\n'), "{err}");
        assert!(!err.contains("not-a-real-secret"), "{err}");
    }

    /// An https:// endpoint is spoken to in TLS through the ring provider: a loopback listener receives a TLS
    /// handshake record (a ClientHello) from the store's client, then hangs up, which is a one-line error.
    #[test]
    fn https_endpoints_get_a_tls_handshake() {
        use std::io::Read;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut head = [0u8; 6];
            conn.read_exact(&mut head).unwrap();
            head
        });
        let url = "s3://bucket/shard.parquet";
        let err = fetch_error(url, &format!("https://127.0.0.1:{port}"), "shard.parquet");
        let head = server.join().unwrap();
        // Record type 22 (handshake), a TLS 1.x record version, handshake type 1 (ClientHello).
        assert_eq!((head[0], head[1], head[5]), (0x16, 0x03, 0x01), "{head:?}");
        assert!(err.starts_with("s3://bucket/shard.parquet: "), "{err}");
        assert!(!err.contains('\n'), "{err}");
    }
}
