//! The one error type of the core. Every variant renders as a single line that names the file (when
//! there is one) and the problem, because the CLI prints it as is.

use std::path::{Path, PathBuf};

/// Everything that can stop a scan before it produces a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A path that does not exist.
    #[error("{path}: no such file or directory")]
    NotFound { path: PathBuf },
    /// The operating system refused an operation on a file (permission, I/O failure).
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file that exists but is not a valid input (bad Parquet, bad .npy header, inconsistent offsets).
    #[error("{path}: {message}")]
    InvalidInput { path: PathBuf, message: String },
    /// A column that was asked for (or needed) is absent or has the wrong type.
    #[error("{path}: {message}")]
    Column { path: PathBuf, message: String },
    /// A profile that cannot be used: unknown name, bad TOML, a required token missing.
    #[error("profile {name}: {message}")]
    Profile { name: String, message: String },
    /// A tokenizer directory that cannot resolve a profile's token strings.
    #[error("{path}: {message}")]
    Tokenizer { path: PathBuf, message: String },
    /// A chat template that refused or failed to render a prompt record (`raise_exception`, a runaway loop, a
    /// record that is not a list of message maps).
    #[error("chat template: {0}")]
    Template(String),
    /// An object-store URL that cannot be read (network failure after the retries, missing bucket or object,
    /// credentials refused); never carries a credential.
    #[error("{url}: {message}")]
    Remote { url: String, message: String },
    /// Wrong arguments: nothing to scan, conflicting options.
    #[error("{0}")]
    Usage(String),
    /// The scan was cancelled (Ctrl-C or an explicit abort).
    #[error("scan interrupted")]
    Interrupted,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        if source.kind() == std::io::ErrorKind::NotFound {
            Error::NotFound {
                path: path.to_path_buf(),
            }
        } else {
            Error::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    }

    /// The error with its path written as `place` gives it (a staged copy's path as the URL it was staged
    /// from), or as it is where `place` gives `None`.
    pub fn relocated(self, place: impl Fn(&Path) -> Option<PathBuf>) -> Self {
        let place = |path: PathBuf| place(&path).unwrap_or(path);
        match self {
            Error::NotFound { path } => Error::NotFound { path: place(path) },
            Error::Io { path, source } => Error::Io {
                path: place(path),
                source,
            },
            Error::InvalidInput { path, message } => Error::InvalidInput {
                path: place(path),
                message,
            },
            Error::Column { path, message } => Error::Column {
                path: place(path),
                message,
            },
            other => other,
        }
    }

    pub fn invalid(path: &Path, message: impl Into<String>) -> Self {
        Error::InvalidInput {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub fn column(path: &Path, message: impl Into<String>) -> Self {
        Error::Column {
            path: path.to_path_buf(),
            message: message.into(),
        }
    }

    pub fn profile(name: &str, message: impl Into<String>) -> Self {
        Error::Profile {
            name: name.to_string(),
            message: message.into(),
        }
    }
}

/// The message a caught panic carried (`panic!` with a literal or a formatted string), if any: the binding's
/// quiet panic hook prints nothing, so what a panic said travels in the error it becomes.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
}
