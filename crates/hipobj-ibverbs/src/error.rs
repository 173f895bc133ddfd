//! libibverbs return codes and errnos as [`VerbsError`]s.

use std::ffi::c_int;
use std::ptr::NonNull;

use hipobj_platform::{VerbsError, VerbsErrorKind};

/// The calling thread's `errno`.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn kind_of(errno: i32) -> VerbsErrorKind {
    match errno {
        libc::ENOENT | libc::ENODEV | libc::ENXIO => VerbsErrorKind::NotFound,
        libc::EOPNOTSUPP | libc::ENOSYS | libc::EPROTONOSUPPORT => VerbsErrorKind::Unsupported,
        libc::EINVAL | libc::EFAULT | libc::EPERM | libc::EACCES => VerbsErrorKind::InvalidArgument,
        libc::ENOMEM | libc::ENOSPC | libc::EAGAIN | libc::EBUSY => VerbsErrorKind::OutOfResources,
        _ => VerbsErrorKind::Os,
    }
}

pub(crate) fn os_error(op: &'static str, errno: i32) -> VerbsError {
    let text = std::io::Error::from_raw_os_error(errno);
    VerbsError::with_errno(op, kind_of(errno), errno, text.to_string())
}

/// Checks a libibverbs return code (0, or an errno, or -1 with errno set).
pub(crate) fn check(op: &'static str, rc: c_int) -> Result<(), VerbsError> {
    match rc {
        0 => Ok(()),
        -1 => Err(os_error(op, errno())),
        e if e > 0 => Err(os_error(op, e)),
        e => Err(os_error(op, -e)),
    }
}

/// A pointer a libibverbs constructor returned, or its errno when NULL.
pub(crate) fn non_null<T>(op: &'static str, p: *mut T) -> Result<NonNull<T>, VerbsError> {
    NonNull::new(p).ok_or_else(|| os_error(op, errno()))
}

/// The error of a provider that lacks an entry of its ops table.
pub(crate) fn unsupported(op: &'static str, detail: &'static str) -> VerbsError {
    VerbsError::new(op, VerbsErrorKind::Unsupported, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_kinds() {
        assert_eq!(kind_of(libc::EINVAL), VerbsErrorKind::InvalidArgument);
        assert_eq!(kind_of(libc::ENOMEM), VerbsErrorKind::OutOfResources);
        assert_eq!(kind_of(libc::EOPNOTSUPP), VerbsErrorKind::Unsupported);
        assert_eq!(kind_of(libc::EIO), VerbsErrorKind::Os);
        assert!(check("x", 0).is_ok());
        assert_eq!(
            check("x", libc::EINVAL).map_err(|e| e.errno),
            Err(Some(libc::EINVAL))
        );
    }
}
