//! One error type for the command line: a sentence for the operator.

use std::fmt;

#[derive(Debug)]
pub struct CliError(pub String);

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for CliError {
    fn from(s: String) -> Self {
        CliError(s)
    }
}

impl From<&str> for CliError {
    fn from(s: &str) -> Self {
        CliError(s.to_string())
    }
}

impl From<platter_io::MemberError> for CliError {
    fn from(e: platter_io::MemberError) -> Self {
        CliError(e.to_string())
    }
}

impl From<platter_io::assembly::OpenError> for CliError {
    fn from(e: platter_io::assembly::OpenError) -> Self {
        CliError(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, CliError>;
