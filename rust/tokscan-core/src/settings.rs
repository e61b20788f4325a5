//! Settings read from the environment (`TOKSCAN_MAX_LINE_BYTES`, `TOKSCAN_MAX_DECOMPRESSED_BYTES`,
//! `TOKSCAN_RECORDS_MEMORY`, `TOKSCAN_MAX_FILE_BYTES`): a value that is set but is not what the variable takes is
//! a usage error naming it, never a silent fall-back to the default.

use crate::error::{Error, Result};

/// The value of `var` as a count of bytes (a non-negative integer), or `None` when it is unset or empty.
pub fn bytes(var: &str) -> Result<Option<u64>> {
    integer(var, "a number of bytes")
}

/// The value of `var` as a count (a non-negative integer), or `None` when it is unset or empty.
pub fn count(var: &str) -> Result<Option<u64>> {
    integer(var, "a count")
}

fn integer(var: &str, what: &str) -> Result<Option<u64>> {
    match std::env::var(var) {
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => {
            v.trim().parse().map(Some).map_err(|_| {
                Error::Usage(format!("{var}={v:?}: not {what} (a non-negative integer)"))
            })
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(Error::Usage(format!(
            "{var}={v:?}: not {what} (a non-negative integer)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_value_is_a_number_of_bytes_or_an_error_naming_the_variable() {
        // A variable of this test alone: tests run in threads of one process.
        let var = "TOKSCAN_TEST_SETTINGS_BYTES";
        std::env::remove_var(var);
        assert_eq!(bytes(var).unwrap(), None);
        std::env::set_var(var, " 4096 ");
        assert_eq!(bytes(var).unwrap(), Some(4096));
        for bad in ["-1", "abc", "1.5", "1e9"] {
            std::env::set_var(var, bad);
            let err = bytes(var).expect_err("refused").to_string();
            assert!(
                err.contains(var) && err.contains("not a number of bytes"),
                "{err}"
            );
        }
        std::env::remove_var(var);
    }
}
