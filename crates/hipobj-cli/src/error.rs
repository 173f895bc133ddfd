//! The CLI's failures: one sentence for people, and the hipObject code
//! behind it where there is one.

use std::fmt;

use hipobj::ErrorKind;

/// A failure of a command.
#[derive(Debug)]
pub(crate) struct CliError {
    /// The hipObject code behind it, if the failure came from the library or S3.
    pub code: Option<ErrorKind>,
    /// One sentence.
    pub message: String,
}

/// The CLI's result type.
pub(crate) type CliResult<T = ()> = Result<T, CliError>;

impl CliError {
    /// A failure with no hipObject code behind it (bad arguments, files).
    pub(crate) fn plain(message: impl Into<String>) -> Self {
        Self {
            code: None,
            message: message.into(),
        }
    }

    /// A failure with a hipObject code.
    pub(crate) fn coded(code: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            code: Some(code),
            message: message.into(),
        }
    }
}

/// The name of a code as the C API spells it.
pub(crate) fn code_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidValue => "hipObjInvalidValue",
        ErrorKind::NotInitialized => "hipObjNotInitialized",
        ErrorKind::AlreadyInitialized => "hipObjAlreadyInitialized",
        ErrorKind::RdmaError => "hipObjRdmaError",
        ErrorKind::S3Error => "hipObjS3Error",
        ErrorKind::BufNotRegistered => "hipObjBufNotRegistered",
        ErrorKind::BufAlreadyRegistered => "hipObjBufAlreadyRegistered",
        ErrorKind::NicNotFound => "hipObjNicNotFound",
        ErrorKind::DmabufNotSupported => "hipObjDmabufNotSupported",
        ErrorKind::SizeTooLarge => "hipObjSizeTooLarge",
        ErrorKind::InternalError => "hipObjInternalError",
        ErrorKind::Busy => "hipObjBusy",
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message.trim_end_matches('.'))?;
        if let Some(code) = self.code {
            write!(f, " ({})", code_name(code))?;
        }
        Ok(())
    }
}

impl From<hipobj::Error> for CliError {
    fn from(e: hipobj::Error) -> Self {
        Self::coded(e.kind(), e.to_string())
    }
}

impl From<hipobj_s3::Error> for CliError {
    fn from(e: hipobj_s3::Error) -> Self {
        Self::coded(e.kind(), e.to_string())
    }
}
